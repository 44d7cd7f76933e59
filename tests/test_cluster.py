"""configs/cluster: the kustomize bases render and pass strict Kubernetes validation, upstream
bases are the vendored copies of pinned releases (no remote base), images are versioned,
every Secret is only referenced, never filled, the Training Operator gang-schedules with
Volcano, and the Trainer v2 runtime is what the flow renders."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from flows.local.servers.seaweedfs import SeaweedFS
from steps.common.version import package_version
from tests.helpers.cluster_build import CLUSTER, K8S_VERSION, VENDOR, kubectl
from tests.helpers.k8s_refs import walk
from tests.helpers.paths import REPO_ROOT, SHARED

LOCAL_BASES = ["pipeline", "seaweedfs", "mlflow"]
# applied after the top level: Volcano's Queue once Volcano answers; Trainer v2 for
# train.launcher=trainjob; KServe (the deploy step) once cert-manager answers
OPTIONAL_BASES = {"scheduling", "trainer", "kserve-crds", "kserve"}
# checked against their CRDs, not core schemas (Queue: tests/test_conformance_cluster.py)
CRD_KINDS = {"ClusterTrainingRuntime", "Queue"}
VALIDATOR = SHARED / "tools" / "validate_manifests.py"


def render(base: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(CLUSTER / base)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def ours(pattern: str) -> list[Path]:
    """The files of configs/cluster matching ``pattern`` that this repository wrote."""
    return sorted(p for p in CLUSTER.rglob(pattern) if VENDOR not in p.parents)


def all_manifests() -> list[dict[str, Any]]:
    """Every Kubernetes object written in configs/cluster (kustomizations excluded)."""
    docs = []
    for path in ours("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                docs.append(doc)
    return docs


@pytest.mark.parametrize("base", LOCAL_BASES)
def test_local_base_renders_and_passes_strict_validation(base: str) -> None:
    docs = render(base)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        if doc["kind"] not in ("Namespace",):
            assert doc["metadata"].get("namespace"), f"{doc['kind']} {doc['metadata']['name']}"


def test_every_written_manifest_passes_strict_validation() -> None:
    for doc in all_manifests():
        if doc["kind"] in CRD_KINDS:
            continue  # test_the_trainer_runtime_is_what_the_flow_renders
        if (
            doc["kind"] == "ConfigMap"
            and doc["metadata"]["name"] == "workflow-controller-configmap"
        ):
            artifacts = yaml.safe_load(doc["data"]["artifactRepository"])
            assert set(artifacts["s3"]) >= {
                "bucket",
                "endpoint",
                "accessKeySecret",
                "secretKeySecret",
            }
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_top_level_kustomization_names_every_base() -> None:
    top = yaml.safe_load((CLUSTER / "kustomization.yaml").read_text())
    bases = sorted(p.parent.name for p in CLUSTER.glob("*/kustomization.yaml"))
    folders = [r for r in top["resources"] if (CLUSTER / r).is_dir()]
    assert sorted([*folders, *OPTIONAL_BASES]) == bases
    for path in ours("kustomization.yaml"):
        spec = yaml.safe_load(path.read_text())
        for resource in spec.get("resources", []):
            if VENDOR not in (path.parent / resource).resolve().parents:
                assert (path.parent / resource).exists(), f"{path}: {resource}"
        for patch in spec.get("patches", []):
            if "path" in patch:
                assert (path.parent / patch["path"]).is_file()


@pytest.mark.parametrize(
    ("base", "vendored", "repo", "tag"),
    [
        ("argo", "../vendor/argo/manifests/cluster-install", "argoproj/argo-workflows", "v4.0.5"),
        (
            "training-operator",
            "../vendor/training-operator/manifests/overlays/standalone",
            "kubeflow/trainer",
            "v1.9.4",
        ),
        (".", "vendor/volcano/installer/volcano-development.yaml", "volcano-sh/volcano", "v1.14.4"),
        (
            "trainer/manager",
            "../../vendor/trainer/manifests/base/manager",
            "kubeflow/trainer",
            "v2.3.0",
        ),
        (
            "trainer/jobset",
            "../../vendor/jobset/config/default",
            "kubernetes-sigs/jobset",
            "v0.12.0",
        ),
    ],
)
def test_upstream_bases_are_vendored_pinned_releases(
    base: str, vendored: str, repo: str, tag: str
) -> None:
    """Each upstream base is a vendored path (configs/cluster/vendor.py), locked at its tag."""
    spec = yaml.safe_load((CLUSTER / base / "kustomization.yaml").read_text())
    assert vendored in spec["resources"], spec["resources"]
    component = vendored.split("vendor/")[1].split("/")[0]
    path = vendored.split(f"vendor/{component}/")[1]
    locked = [
        line.split()
        for line in (CLUSTER / "vendor.lock").read_text().splitlines()
        if line.startswith(f"{component} ")
    ]
    assert {(r, t) for _, r, t, _, _ in locked} == {(repo, tag)}
    assert any(p == path or p.startswith(f"{path}/") for _, _, _, p, _ in locked), path


def test_images_are_pinned_and_ours_carry_the_package_version() -> None:
    images = [
        c["image"]
        for doc in all_manifests()
        for node in walk(doc)
        for c in node.get("containers", [])
        if isinstance(c, dict) and "image" in c
    ]
    assert images
    for path in ours("kustomization.yaml"):
        for pin in yaml.safe_load(path.read_text()).get("images", []):
            assert pin.get("newTag", "latest") != "latest", (path, pin)
    for image in images:
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and "/" not in tag, image
        if "/cifar-" in name:
            assert tag == package_version(), image


def test_secrets_are_referenced_never_filled_and_their_shapes_documented() -> None:
    shapes = {
        d["metadata"]["name"]: set(d["stringData"])
        for d in yaml.safe_load_all((CLUSTER / "secrets.example.yaml").read_text())
    }
    for doc in yaml.safe_load_all((CLUSTER / "secrets.example.yaml").read_text()):
        assert set(doc["stringData"].values()) == {""}, "secrets.example.yaml holds no values"
    referenced: dict[str, set[str]] = {}
    for doc in all_manifests():
        # a service-account token Secret is filled by Kubernetes' token controller: no value
        # of it is made by hand (configs/cluster/pipeline/executor-rbac.yaml)
        token = doc.get("type") == "kubernetes.io/service-account-token" and not doc.get("data")
        assert doc["kind"] != "Secret" or token or doc["metadata"]["name"] in shapes
        for node in walk(doc):
            if "secretKeyRef" in node:
                ref = node["secretKeyRef"]
                referenced.setdefault(ref["name"], set()).add(ref["key"])
            if "secretRef" in node:
                referenced.setdefault(node["secretRef"]["name"], set())
        if doc["kind"] == "ConfigMap" and "artifactRepository" in doc.get("data", {}):
            s3 = yaml.safe_load(doc["data"]["artifactRepository"])["s3"]
            for ref in (s3["accessKeySecret"], s3["secretKeySecret"]):
                referenced.setdefault(ref["name"], set()).add(ref["key"])
    assert referenced
    for name, keys in referenced.items():
        assert name in shapes and keys <= shapes[name], (name, keys)
    e2e = (REPO_ROOT / ".github" / "workflows" / "e2e.yml").read_text()
    guide = (REPO_ROOT / "docs" / "cluster.md").read_text()
    for name in set(referenced) | {"cifar-s3"}:
        assert f"create secret generic {name}" in e2e, name
        assert f"create secret generic {name}" in guide, name


def test_the_training_operator_gang_schedules_with_volcano() -> None:
    spec = yaml.safe_load((CLUSTER / "training-operator" / "kustomization.yaml").read_text())
    (patch,) = [p for p in spec["patches"] if "target" in p]
    assert patch["target"] == {"kind": "Deployment", "name": "training-operator"}
    (op,) = yaml.safe_load(patch["patch"])
    assert op["path"] == "/spec/template/spec/containers/0/args"
    assert op["value"][0] == "--gang-scheduler-name=volcano"
    kind = yaml.safe_load((REPO_ROOT / "configs" / "kind.yaml").read_text())
    assert kind["cluster"]["scheduler_name"] == "volcano"  # the e2e run uses the gang


@pytest.mark.parametrize("config", ["kind", "cluster"])
def test_the_trainer_runtime_the_install_applies_passes_its_crd(config: str, tmp_path) -> None:
    """docs/cluster.md renders the runtime from the config its runs use (kind's, a GPU
    cluster's: tests/test_cluster_install.py), gang-scheduled by Volcano either way."""
    from tests.helpers.cluster_install_steps import cluster_commands, rendered_runtime

    command = f".venv/bin/python flows/cifar.py --config configs/{config}.yaml --render-runtime | "
    assert any(c.startswith(command) for c in cluster_commands()), command
    runtime = rendered_runtime(f"configs/{config}.yaml", [])
    assert runtime["kind"] == "ClusterTrainingRuntime"
    assert runtime["spec"]["podGroupPolicy"] == {"volcano": {}}
    if VALIDATOR.is_file():
        path = tmp_path / "runtime.yaml"
        path.write_text(yaml.safe_dump(runtime))
        done = subprocess.run(
            [sys.executable, str(VALIDATOR), str(path)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_s3_endpoint_is_seaweedfs_everywhere() -> None:
    service = "seaweedfs.seaweedfs.svc:8333"
    for path in ("cluster.yaml", "kind.yaml"):
        cfg = yaml.safe_load((REPO_ROOT / "configs" / path).read_text())
        assert cfg["storage"]["endpoint_url"] == f"http://{service}", path
    docs = render("seaweedfs")
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert (svc["metadata"]["name"], svc["metadata"]["namespace"]) == ("seaweedfs", "seaweedfs")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]}["s3"] == 8333
    pod = deploy["spec"]["template"]["spec"]
    assert "-s3.config=/config/s3.json" in pod["containers"][0]["args"]
    identities = {
        e["valueFrom"]["secretKeyRef"]["name"] for e in pod["initContainers"][0]["env"]
    }  # one Secret per S3 identity (tests/test_seaweedfs_security.py tries each)
    assert identities == {f"seaweedfs-{r}" for r in ("admin", "steps", "mlflow", "predictor")}
    text = "\n".join(p.read_text() for p in ours("*.yaml"))
    assert "minio" not in text.lower()


def test_seaweedfs_as_deployed_takes_a_write_in_every_bucket(tmp_path: Path) -> None:
    """The deployment's volume settings leave room for every bucket the Job creates: each
    bucket is a collection that grows volumes of its own (7 by default, past the default
    ``-volume.max`` of 8 at the second bucket)."""
    docs = render("seaweedfs")
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (job,) = [d for d in docs if d["kind"] == "Job"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    volume_args = [a for a in container["args"] if a.startswith(("-volume.", "-master.volume"))]
    volume_env = {  # the volume settings (the JWT keys come from a Secret)
        e["name"]: e["value"] for e in container["env"] if e["name"].startswith("WEED_MASTER_")
    }
    assert volume_env
    buckets = job["spec"]["template"]["spec"]["containers"][0]["args"]  # create-buckets.py's
    assert len(buckets) >= 3
    server = SeaweedFS(tmp_path, volumes=(volume_args, volume_env)).start()
    try:
        client = server.client()
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
            client.put_object(Bucket=bucket, Key="probe", Body=b"written")
            assert client.get_object(Bucket=bucket, Key="probe")["Body"].read() == b"written"
    finally:
        server.stop()


# MLflow's tracking server takes --allowed-hosts (its security middleware) from 3.5.0 on
# (mlflow docs, "Tracking Server Security": "MLflow 3.5.0+ includes security middleware";
# an older `mlflow server` stops on the unknown option).
ALLOWED_HOSTS_SINCE = Version("3.5")


def test_the_mlflow_server_runs_an_mlflow_that_takes_its_options() -> None:
    """Issue 30, defect 9: the Deployment passes --allowed-hosts, while the [train] extra
    (what the cifar-train image it runs from installs: containers/train.Dockerfile) let pip
    pick mlflow 3.1."""
    docs = render("mlflow")
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (server,) = deploy["spec"]["template"]["spec"]["containers"]
    assert server["image"].split("/")[-1].startswith("cifar-train:")
    assert any(a.startswith("--allowed-hosts=") for a in server["args"])
    assert '"cifar-pipeline[train]==' in (REPO_ROOT / "containers/train.Dockerfile").read_text()
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()  # no tomllib on Python 3.10
    for extra in ("train", "serve"):
        block = re.search(rf"^{extra} = \[(.*?)^\]", pyproject, re.S | re.M).group(1)
        (wanted,) = [Requirement(r) for r in re.findall(r'"(mlflow[^"]*)"', block)]
        floors = [Version(s.version) for s in wanted.specifier if s.operator in (">=", "==")]
        assert floors and min(floors) >= ALLOWED_HOSTS_SINCE, (extra, str(wanted))


def test_the_cluster_page_counts_the_images_images_yml_builds() -> None:
    workflow = yaml.safe_load((REPO_ROOT / ".github/workflows/images.yml").read_text())
    built = workflow["jobs"]["build"]["strategy"]["matrix"]["image"]
    guide = " ".join((REPO_ROOT / "docs" / "cluster.md").read_text().split())
    (count, names) = re.findall(
        r"`images\.yml` builds and pushes the (\w+) images \(([^)]*)\)", guide
    )[0]
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight"]
    assert words.index(count) == len(built), count
    assert re.findall(r"`cifar-(\w+)`", names) == built
