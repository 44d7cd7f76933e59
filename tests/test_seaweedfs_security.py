"""SeaweedFS as configs/cluster/seaweedfs installs it: the wheel's ``weed`` (the image's
version, 4.48) started with the install's own files, security.toml and the S3 identities
rendered by the init container's script from keys made here, the JWT keys in the variables
the Deployment sets. What each identity may do and may not, as the S3 gateway decides it
(weed/s3api/s3api_server.go: the action each request needs; auth_credentials.go CanDo: a
bucket or a prefix pattern), and what a client that bypasses S3 gets from the filer and the
volume server: nothing unsigned.

The cluster's part that no test here can exercise: the pod's loopback (the master, volume
server and filer bind 127.0.0.1, so another pod reaches only the S3 gateway's ports) is
checked as the Deployment says it, and the server here binds 127.0.0.1 throughout."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.config import Config
from botocore.exceptions import ClientError

from flows.local.servers.seaweedfs import SeaweedFS
from tests.helpers.cluster_build import CLUSTER, kubectl

pytestmark = pytest.mark.slow
LAYER = CLUSTER / "seaweedfs"
MODEL = "3/models/m-0123abcd/artifacts/MLmodel"  # where MLflow keeps a logged model's files
RUN_ARTIFACT = "3/0123abcd/artifacts/confusion_matrix.png"  # a run's artifact, not a model


def rendered() -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(LAYER)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def deployment_pod() -> dict[str, Any]:
    (deploy,) = [d for d in rendered() if d["kind"] == "Deployment"]
    return deploy["spec"]["template"]["spec"]


def secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each variable a container sets from a Secret: (Secret, key)."""
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def render_identities(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The init container's command on the shipped template: ``sh render-s3-config.sh``."""
    return subprocess.run(
        ["sh", str(LAYER / "render-s3-config.sh"), str(LAYER / "s3-identities.json"), str(out)],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=False,
    )


class Installed:
    """The server, the key pair of each Secret the init container reads, by Secret name."""

    def __init__(self, server: SeaweedFS, keys: dict[str, tuple[str, str]]) -> None:
        self.server, self.keys = server, keys

    def client(self, secret: str | None):
        """An S3 client with a Secret's keys; None: anonymous (unsigned)."""
        if secret is None:
            import boto3
            from botocore import UNSIGNED

            return boto3.client(
                "s3",
                endpoint_url=self.server.endpoint,
                region_name="us-east-1",
                config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}),
            )
        return self.server.client(self.keys[secret], retries={"max_attempts": 1})


def create_buckets(server: SeaweedFS, keys: tuple[str, str], buckets: list[str]):
    """The buckets Job's command, ``python create-buckets.py BUCKET...``, with its env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"AWS_ENDPOINT_URL": server.endpoint, "AWS_DEFAULT_REGION": "us-east-1"}
    env |= {"AWS_ACCESS_KEY_ID": keys[0], "AWS_SECRET_ACCESS_KEY": keys[1]}
    command = [sys.executable, str(LAYER / "create-buckets.py"), *buckets]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("seaweedfs-installed")
    pod = deployment_pod()
    (init,) = pod["initContainers"]
    # every variable the init container sets, from the Secret and key the Deployment names
    variables = secret_refs(init)
    keys: dict[str, tuple[str, str]] = {}
    for secret in sorted({s for s, _ in variables.values()}):
        keys[secret] = (f"{secret}-{secrets.token_hex(4)}", secrets.token_hex(20))
    env = {
        name: keys[secret][0 if key == "AWS_ACCESS_KEY_ID" else 1]
        for name, (secret, key) in variables.items()
    }
    done = render_identities(root / "s3.json", env)
    assert done.returncode == 0, done.stderr
    (server_container,) = pod["containers"]
    jwt = {name: secrets.token_hex(32) for name in secret_refs(server_container)}
    admin = keys["seaweedfs-admin"]
    server = SeaweedFS(
        root / "server",
        identities=(root / "s3.json").read_text(),
        security=(LAYER / "security.toml").read_text(),
        env=jwt,
        probe=(*admin, "cifar-pipeline"),  # an identity that may make and write it
    ).start()
    try:
        (job,) = [d for d in rendered() if d["kind"] == "Job"]
        buckets = job["spec"]["template"]["spec"]["containers"][0]["args"]
        made = create_buckets(server, admin, buckets)
        assert made.returncode == 0, made.stderr
        assert "bucket cifar-pipeline: exists, kept" in made.stdout  # the probe made it
        assert "bucket mlflow: created" in made.stdout
        admin_client = server.client(admin)
        for key in (MODEL, RUN_ARTIFACT):
            admin_client.put_object(Bucket="mlflow", Key=key, Body=b"written by the admin")
        for bucket in ("cifar-pipeline", "argo-artifacts"):
            admin_client.put_object(Bucket=bucket, Key="runs/r/x", Body=b"written by the admin")
        yield Installed(server, keys)
    finally:
        server.stop()


def _put(c, bucket: str, key: str) -> Any:
    return c.put_object(Bucket=bucket, Key=key, Body=b"written")


def _get(c, bucket: str, key: str) -> Any:
    return c.get_object(Bucket=bucket, Key=key)["Body"].read()


def _list(c, bucket: str, prefix: str) -> Any:
    return c.list_objects_v2(Bucket=bucket, Prefix=prefix)


def _delete(c, bucket: str, key: str) -> Any:
    return c.delete_object(Bucket=bucket, Key=key)


def _multipart(c, bucket: str, key: str) -> Any:
    """A large object in parts, as the steps upload a dataset (5 MiB parts, the least S3
    takes)."""
    upload = c.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = [
        {"PartNumber": n, "ETag": c.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=n, Body=b"p" * (5 << 20)
        )["ETag"]}
        for n in (1, 2)
    ]  # fmt: skip
    return c.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
    )


def _create_bucket(c, bucket: str, key: str) -> Any:
    return c.create_bucket(Bucket=bucket)


def _delete_bucket(c, bucket: str, key: str) -> Any:
    return c.delete_bucket(Bucket=bucket)


OPERATIONS = {
    "put": _put,
    "get": _get,
    "list": _list,
    "delete": _delete,
    "multipart": _multipart,
    "create-bucket": _create_bucket,
    "delete-bucket": _delete_bucket,
}
STEPS, MLFLOW, PREDICTOR, ADMIN = (
    "seaweedfs-steps", "seaweedfs-mlflow", "seaweedfs-predictor", "seaweedfs-admin",
)  # fmt: skip
# (Secret, operation, bucket, key or prefix, allowed); None: anonymous
CASES = [
    # the steps: the pipeline's bucket and Argo's, read, write, list, delete; nothing else
    (STEPS, "put", "cifar-pipeline", "runs/r/steps", True),
    (STEPS, "get", "cifar-pipeline", "runs/r/x", True),
    (STEPS, "list", "cifar-pipeline", "runs/", True),
    (STEPS, "multipart", "cifar-pipeline", "datasets/big", True),
    (STEPS, "delete", "cifar-pipeline", "runs/r/steps", True),
    (STEPS, "put", "argo-artifacts", "runs/r/log", True),
    (STEPS, "get", "argo-artifacts", "runs/r/x", True),
    (STEPS, "get", "mlflow", MODEL, False),
    (STEPS, "put", "mlflow", MODEL, False),
    (STEPS, "list", "mlflow", "", False),
    (STEPS, "create-bucket", "cifar-other", "", False),
    (STEPS, "delete-bucket", "argo-artifacts", "", False),
    # MLflow: its bucket only
    (MLFLOW, "put", "mlflow", "3/run/artifacts/new", True),
    (MLFLOW, "get", "mlflow", RUN_ARTIFACT, True),
    (MLFLOW, "list", "mlflow", "3/", True),
    (MLFLOW, "multipart", "mlflow", "3/run/artifacts/large", True),
    (MLFLOW, "delete", "mlflow", "3/run/artifacts/new", True),
    (MLFLOW, "get", "cifar-pipeline", "runs/r/x", False),
    (MLFLOW, "put", "argo-artifacts", "runs/r/evil", False),
    (MLFLOW, "delete-bucket", "mlflow", "", False),
    # the predictor: the models MLflow keeps, read only
    (PREDICTOR, "get", "mlflow", MODEL, True),
    (PREDICTOR, "list", "mlflow", "3/models/m-0123abcd/", True),
    (PREDICTOR, "get", "mlflow", RUN_ARTIFACT, False),
    (PREDICTOR, "list", "mlflow", "", False),
    (PREDICTOR, "put", "mlflow", MODEL, False),
    (PREDICTOR, "delete", "mlflow", MODEL, False),
    (PREDICTOR, "get", "cifar-pipeline", "runs/r/x", False),
    (PREDICTOR, "create-bucket", "cifar-other", "", False),
    # the admin: the three buckets, no other
    (ADMIN, "get", "mlflow", MODEL, True),
    (ADMIN, "create-bucket", "cifar-other", "", False),
    # no identity at all
    (None, "get", "mlflow", MODEL, False),
    (None, "list", "cifar-pipeline", "", False),
    (None, "put", "cifar-pipeline", "runs/r/anon", False),
]


@pytest.mark.parametrize(
    ("secret", "operation", "bucket", "key", "allowed"),
    CASES,
    ids=[f"{s or 'anonymous'}-{o}-{b}-{'allowed' if a else 'refused'}" for s, o, b, _, a in CASES],
)
def test_each_identity_does_what_its_role_needs_and_nothing_else(
    installed: Installed, secret: str | None, operation: str, bucket: str, key: str, allowed: bool
) -> None:
    client = installed.client(secret)
    if allowed:
        OPERATIONS[operation](client, bucket, key)
        return
    with pytest.raises(ClientError) as refused:
        OPERATIONS[operation](client, bucket, key)
    assert refused.value.response["Error"]["Code"] == "AccessDenied", refused.value.response


def test_a_wrong_secret_key_is_refused(installed: Installed) -> None:
    access, _ = installed.keys[STEPS]
    client = installed.server.client((access, "0" * 40), retries={"max_attempts": 1})
    with pytest.raises(ClientError) as refused:
        client.get_object(Bucket="cifar-pipeline", Key="runs/r/x")
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_only_the_admin_makes_buckets_and_the_job_runs_again(installed: Installed) -> None:
    server = installed.server
    again = create_buckets(server, installed.keys[ADMIN], ["cifar-pipeline", "mlflow"])
    assert again.returncode == 0, again.stderr
    assert again.stdout.split("\n")[:2] == [
        "bucket cifar-pipeline: exists, kept",
        "bucket mlflow: exists, kept",
    ]
    refused = create_buckets(server, installed.keys[STEPS], ["cifar-extra"])
    assert refused.returncode == 1
    assert refused.stderr == (
        "bucket cifar-extra: cannot look it up (403); are these cifar-admin's keys "
        "(Secret seaweedfs-admin)?\n"
    )
    with pytest.raises(ClientError):
        server.client(installed.keys[ADMIN]).head_bucket(Bucket="cifar-extra")


def _http(method: str, url: str, body: bytes | None = None, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_filer_and_volume_server_refuse_what_is_not_signed(installed: Installed) -> None:
    """What a pod that skipped S3 would try, on the filer's and volume server's HTTP ports
    (reachable here, on the cluster only from inside the SeaweedFS pod): the jwt.filer_signing
    and jwt.signing keys make each refuse it, 401."""
    server = installed.server
    filer = f"http://127.0.0.1:{server.filer}"
    model = f"{filer}/buckets/mlflow/{MODEL}"
    assert _http("PUT", model, b"a replaced model") == 401
    assert _http("POST", f"{filer}/buckets/cifar-pipeline/runs/evil", b"x") == 401
    assert _http("GET", model) == 401
    assert _http("DELETE", model) == 401
    reader = server.client(installed.keys[PREDICTOR])
    assert _get(reader, "mlflow", MODEL) == b"written by the admin"  # nothing replaced it
    # The master hands out a file id to anyone who asks; the volume server takes no write
    # for it without the master's JWT, and reads nothing without one either.
    with urllib.request.urlopen(
        urllib.request.Request(f"http://127.0.0.1:{server.master}/dir/assign", method="POST"),
        timeout=10,
    ) as response:
        fid = json.loads(response.read())["fid"]
    boundary = "x-boundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n'
        f"evil\r\n--{boundary}--\r\n"
    ).encode()
    volume = f"http://127.0.0.1:{server.volume}/{fid}"
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    assert _http("POST", volume, body, headers) == 401
    assert _http("GET", volume) == 401


def test_the_pod_runs_the_files_tested_here_and_exposes_s3_alone() -> None:
    """What ties the server above to the cluster's: the Deployment renders its identities
    with the same script and template, reads this security.toml, takes each JWT key and each
    identity's keys from Secrets (one Secret per identity), holds no AWS_* of its own, keeps
    the master, volume server and filer on the loopback, and its Service names S3 alone."""
    docs = rendered()
    pod = deployment_pod()
    (init,) = pod["initContainers"]
    (server,) = pod["containers"]
    assert init["command"] == ["/bin/sh", "/etc/seaweedfs/render-s3-config.sh"]
    assert init["args"] == ["/etc/seaweedfs/s3-identities.json", "/config/s3.json"]
    assert "-s3.config=/config/s3.json" in server["args"]
    config_mount = next(m for m in server["volumeMounts"] if m["mountPath"].endswith(".toml"))
    assert config_mount == {
        "name": "seaweedfs-config",
        "mountPath": "/etc/seaweedfs/security.toml",
        "subPath": "security.toml",
        "readOnly": True,
    }
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    for name in ("security.toml", "s3-identities.json", "render-s3-config.sh"):
        assert config["data"][name] == (LAYER / name).read_text(), name
    # every placeholder of the template from the init container's env, each identity's
    # pair from one Secret of its own
    template = (LAYER / "s3-identities.json").read_text()
    placeholders = set(re.findall(r"\$\{([A-Z_]+)\}", template))
    refs = secret_refs(init)
    assert set(refs) == placeholders
    identities = json.loads(template)["identities"]
    owners = []
    for identity in identities:
        (credential,) = identity["credentials"]
        pair = {refs[v.strip("${}")] for v in credential.values()}
        assert {key for _, key in pair} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
        (owner,) = {secret for secret, _ in pair}
        owners.append(owner)
    assert len(set(owners)) == len(identities) == 4
    admins = [i["name"] for i in identities if any(a.startswith("Admin") for a in i["actions"])]
    assert admins == ["cifar-admin"]
    # security.toml's four keys from seaweedfs-jwt; no AWS_* (an extra admin identity)
    jwt = secret_refs(server)
    assert jwt == {
        f"WEED_JWT_{k}_KEY": ("seaweedfs-jwt", f"WEED_JWT_{k}_KEY")
        for k in ("SIGNING", "SIGNING_READ", "FILER_SIGNING", "FILER_SIGNING_READ")
    }
    toml = (LAYER / "security.toml").read_text()
    for section in ("signing", "signing.read", "filer_signing", "filer_signing.read"):
        assert f'[jwt.{section}]\nkey = ""' in toml, section  # the key from the Secret
    assert not [e for e in server.get("env", []) if e["name"].startswith("AWS_")]
    assert "envFrom" not in server
    args = server["args"]
    assert {"-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3.ip.bind=0.0.0.0"} <= set(args)
    assert [p["containerPort"] for p in server["ports"]] == [8333]
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8333, "s3")]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "ADMIN_ACCESS_KEY is unset or empty"),
        ('key"with-a-quote', "ADMIN_ACCESS_KEY holds a character outside"),
        ("key|with|bars", "ADMIN_ACCESS_KEY holds a character outside"),
    ],
    ids=["empty", "quote", "sed-delimiter"],
)
def test_the_identities_script_refuses_a_key_it_cannot_write(
    tmp_path: Path, value: str, message: str
) -> None:
    template = (LAYER / "s3-identities.json").read_text()
    env = {name: "k" + secrets.token_hex(8) for name in re.findall(r"\$\{([A-Z_]+)\}", template)}
    env["ADMIN_ACCESS_KEY"] = value
    done = render_identities(tmp_path / "s3.json", env)
    assert done.returncode == 2
    assert message in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing half-written
