"""The PyTorchJob manifest: the operator webhook's rules (one Master, a ``pytorch`` container,
DNS-1035 names that fit 63 characters with the replica suffixes) and the config's
replicas, processes, GPUs, /dev/shm, NCCL environment and Volcano scheduling."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubeflow.training import models as kf

from flows.cifar import build_template
from flows.errors import FlowError
from flows.manifests import pytorchjob
from flows.manifests.names import dns1035
from flows.manifests.shared_pod import EnvSpec
from steps.common.config import ConfigError, load_config
from tests.helpers.flow_helpers import CONFIGS, VALIDATOR, check_golden, job_of, run_of
from tests.helpers.job_checks import (
    CLUSTER_YAML,
    DNS1035,
    NETWORK_CASES,
    network_problems,
    replica_names,
    webhook_problems,
)
from tests.helpers.paths import REPO_ROOT

ARGS = ["-m", "steps.train", "--dataset", "D", "--output", "M"]
ENV = [
    EnvSpec("MLFLOW_TRACKING_URI", "http://mlflow:5000"),
    EnvSpec("AWS_ACCESS_KEY_ID", secret="s3"),
]


def job(path: Path, *overrides: str) -> dict[str, Any]:
    cfg = load_config(path, list(overrides))
    built = pytorchjob.build_pytorchjob(cfg, args=ARGS, env=ENV, labels={"app": "cifar"})
    assert isinstance(built, kf.KubeflowOrgV1PyTorchJob)
    return pytorchjob.to_manifest(built)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_each_config_job_passes_the_webhook_and_matches_golden(path: Path) -> None:
    manifest = job(path)
    assert webhook_problems(manifest) == []
    cfg = load_config(path)
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == (
        {"Master": 1, "Worker": cfg.cluster.nodes - 1} if cfg.cluster.nodes > 1 else {"Master": 1}
    )
    check_golden(f"{path.stem}-pytorchjob", manifest)
    # the workflow carries this job, with the real step arguments: the one that runs with
    # the template's default parameters
    workflow_job = job_of(build_template(cfg).to_dict())
    assert webhook_problems(workflow_job) == []
    assert {k: v["replicas"] for k, v in workflow_job["spec"]["pytorchReplicaSpecs"].items()} == {
        k: v["replicas"] for k, v in specs.items()
    }
    assert workflow_job["metadata"]["generateName"] == manifest["metadata"]["generateName"]


@pytest.mark.parametrize(
    ("prefix", "nodes"),
    [
        pytest.param("cifar-train", 1, id="default"),
        pytest.param("cifar-train", 1000, id="a-thousand-nodes"),
        pytest.param("x" * 100, 2, id="100-chars"),
        pytest.param(
            "Team_ML.Experiments/CIFAR 10 nightly retrain, a very long name", 64, id="odd"
        ),
        pytest.param("9-lives-start-with-a-digit", 3, id="digit-first"),
        pytest.param("-" * 80 + "a" * 80, 8, id="dashes"),
    ],
)
def test_generated_names_fit_63_characters_with_replica_suffixes(prefix: str, nodes: int) -> None:
    manifest = job(
        REPO_ROOT / "configs" / "smoke.yaml",
        f"cluster.job_name_prefix={prefix}",
        f"cluster.nodes={nodes}",
    )
    assert webhook_problems(manifest) == []
    assert max(len(n) for n in replica_names(manifest)) <= 63


@pytest.mark.parametrize(
    ("text", "max_len", "expected"),
    [
        pytest.param("cifar-train", 63, "cifar-train", id="kept"),
        pytest.param("CIFAR_Train.v2", 63, "cifar-train-v2", id="sanitised"),
        pytest.param("42-abc", 63, "abc", id="no-leading-digit"),
        pytest.param("---", 63, "job", id="nothing-left"),
        pytest.param("a" * 30, 20, "a" * 11 + "-" + "[0-9a-f]{8}", id="cut-with-hash"),
    ],
)
def test_dns1035_names(text: str, max_len: int, expected: str) -> None:
    name = dns1035(text, max_len)
    assert re.fullmatch(expected, name) and len(name) <= max_len and DNS1035.fullmatch(name)


def test_cut_names_stay_apart() -> None:
    long = "cifar-train-" + "x" * 80
    assert dns1035(long + "-a", 40) != dns1035(long + "-b", 40)
    with pytest.raises(FlowError, match=r"no room for a name"):
        dns1035(long, 5)


@pytest.mark.parametrize(
    ("nproc", "gpus", "expected"),
    [
        pytest.param("auto", 0, "1", id="auto-cpu"),
        pytest.param("auto", 8, "8", id="auto-one-per-gpu"),
        pytest.param("2", 0, "2", id="cpu-processes"),
        pytest.param("4", 8, "4", id="fewer-than-gpus"),
    ],
)
def test_nproc_per_node_is_in_the_spec(nproc: str, gpus: int, expected: str) -> None:
    manifest = job(
        REPO_ROOT / "configs" / "smoke.yaml",
        f"train.nproc_per_node={nproc}",
        f"cluster.gpus_per_node={gpus}",
    )
    assert manifest["spec"]["nprocPerNode"] == expected
    assert "elasticPolicy" not in manifest["spec"]


def test_more_processes_than_gpus_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"train\.nproc_per_node 16 > cluster\.gpus_per_node 8"):
        job(REPO_ROOT / "configs" / "cluster.yaml", "train.nproc_per_node=16")


def pod(manifest: dict[str, Any], kind: str = "Master") -> dict[str, Any]:
    return manifest["spec"]["pytorchReplicaSpecs"][kind]["template"]


def test_cluster_config_reaches_every_replica() -> None:
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml")
    manifest = job(REPO_ROOT / "configs" / "cluster.yaml")
    c = cfg.cluster
    for kind in ("Master", "Worker"):
        spec = pod(manifest, kind)["spec"]
        (container,) = spec["containers"]
        assert container["resources"] == {
            "requests": {"cpu": c.cpu, "memory": c.memory, "nvidia.com/gpu": str(c.gpus_per_node)},
            "limits": {"memory": c.memory, "nvidia.com/gpu": str(c.gpus_per_node)},
        }
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: env[k] for k in c.nccl_env} == c.nccl_env
        assert {"mountPath": "/dev/shm", "name": "dshm"} in container["volumeMounts"]
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": c.shm_size}} in [
            {"name": v["name"], "emptyDir": v.get("emptyDir")} for v in spec["volumes"]
        ]
        assert spec["nodeSelector"] == c.node_selector and spec["tolerations"] == c.tolerations
        assert spec["schedulerName"] == "volcano" and spec["automountServiceAccountToken"] is False
        assert pod(manifest, kind)["metadata"]["annotations"] == {
            "sidecar.istio.io/inject": "false"
        }
    assert manifest["spec"]["runPolicy"] == {
        "activeDeadlineSeconds": c.active_deadline_seconds,
        "backoffLimit": c.backoff_limit,
        "cleanPodPolicy": c.clean_pod_policy,
        "schedulingPolicy": {
            "minAvailable": c.nodes,
            "priorityClass": c.priority_class,
            "queue": c.queue,
        },
        "ttlSecondsAfterFinished": c.ttl_seconds_after_finished,
    }
    assert manifest["spec"]["nprocPerNode"] == "8"


@pytest.mark.parametrize(
    ("overrides", "check"),
    [
        pytest.param(
            ["cluster.istio_inject=true"],
            lambda m: "annotations" not in pod(m)["metadata"],
            id="istio-allowed",
        ),
        pytest.param(
            ["cluster.clean_pod_policy=All"],
            lambda m: m["spec"]["runPolicy"]["cleanPodPolicy"] == "All",
            id="clean-all",
        ),
        pytest.param(
            ["cluster.nodes=4", "cluster.elastic_min_nodes=2"],
            lambda m: (
                m["spec"]["elasticPolicy"]
                == {"maxReplicas": 4, "maxRestarts": 3, "minReplicas": 2, "rdzvBackend": "c10d"}
                and m["spec"]["nprocPerNode"] == "2"
            ),
            id="elastic",
        ),
        pytest.param(
            ["cluster.pvc=cifar-data"],
            lambda m: (
                {"mountPath": "/mnt/cifar", "name": "data"}
                in pod(m)["spec"]["containers"][0]["volumeMounts"]
            ),
            id="pvc",
        ),
        pytest.param(
            ["cluster.queue=q", "cluster.nodes=3", "cluster.min_available=2"],
            lambda m: (
                m["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2, "queue": "q"}
            ),
            id="gang-of-two",
        ),
        pytest.param(
            [],
            lambda m: (
                "schedulingPolicy" not in m["spec"]["runPolicy"]
                and "schedulerName" not in pod(m)["spec"]
            ),
            id="no-gang-by-default",
        ),
    ],
)
def test_optional_features(overrides: list[str], check: Any) -> None:
    manifest = job(REPO_ROOT / "configs" / "smoke.yaml", *overrides)
    assert webhook_problems(manifest) == []
    assert check(manifest)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        pytest.param(
            ["cluster.elastic_min_nodes=1"],
            r"elastic_min_nodes needs nodes >= 2",
            id="elastic-on-one-node",
        ),
        pytest.param(
            ["cluster.nodes=2", "cluster.elastic_min_nodes=3"],
            r"elastic_min_nodes 3 > nodes 2",
            id="elastic-min-above-max",
        ),
        pytest.param(["cluster.min_available=5"], r"min_available 5 > nodes 1", id="gang"),
        pytest.param(
            ["cluster.shm_size=lots"],
            r"cluster\.shm_size: .*not a Kubernetes quantity",
            id="quantity",
        ),
        pytest.param(
            ["cluster.tolerations=[{efect: NoSchedule}]"],
            r"cluster\.tolerations: .*\['efect'\]",
            id="toleration-typo",
        ),
        pytest.param(
            ["cluster.s3_secret=Bad_Name"],
            r"cluster\.s3_secret: .*not a Kubernetes name",
            id="secret-name",
        ),
    ],
)
def test_bad_cluster_config_fails_naming_the_field(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(REPO_ROOT / "configs" / "smoke.yaml", overrides)


# --- RDMA and host networking (flows/manifests/network.py) ----------------------------------


@pytest.mark.parametrize("case", NETWORK_CASES)
def test_each_network_option_reaches_every_replica_of_the_workflows_job(case: str) -> None:
    """Issue 30, defect 10: RDMA as seed 004 runs it (rdma/hca, NCCL_IB_DISABLE=0,
    IPC_LOCK, the host network), opt-in, in the job Argo creates for 2 nodes."""
    cfg = load_config(CLUSTER_YAML, NETWORK_CASES[case])
    manifest = job_of(run_of(cfg), nodes="2")
    assert webhook_problems(manifest) == []
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"}
    for spec in specs.values():
        pod_spec = spec["template"]["spec"]
        (container,) = pod_spec["containers"]
        assert network_problems(cfg, container, pod_spec) == []


def test_the_network_check_fails_a_job_without_the_options() -> None:
    plain = job(CLUSTER_YAML)
    pod_spec = plain["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    wanted = load_config(CLUSTER_YAML, NETWORK_CASES["rdma-host-network"])
    assert len(network_problems(wanted, container, pod_spec)) == 5


@pytest.mark.skipif(not VALIDATOR.is_file(), reason="../shared (the schema validator) is absent")
def test_the_rdma_render_passes_the_strict_schema_check(tmp_path: Path, capsys) -> None:
    """``flows/cifar.py --config configs/cluster.yaml --set cluster.rdma=true --render``
    (and with the host network), through the strict validator."""
    from flows import cifar
    from flows.cli import main as cli

    files = []
    for extra in (["cluster.rdma=true"], ["cluster.rdma=true", "cluster.host_network=true"]):
        sets = [a for e in extra for a in ("--set", e)]
        assert cli.main(["--config", str(CLUSTER_YAML), *sets, "--render"], cifar) == 0
        files.append(tmp_path / f"render-{len(files)}.yaml")
        files[-1].write_text(capsys.readouterr().out)
        assert "rdma/hca: '1'" in files[-1].read_text()
    done = subprocess.run(
        [sys.executable, str(VALIDATOR), *map(str, files)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("4 documents checked, 0 problems")
