"""train.launcher=trainjob: the Kubeflow Trainer v2 TrainJob and the ClusterTrainingRuntime
it runs on, as data, per config (golden), with the run's parameters substituted, through
the strict schema check, and the conditions Argo ends the step on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows import cifar
from flows.cifar import build_template
from flows.cli import main as cli
from flows.manifests import trainjob
from flows.manifests.names import labels
from flows.manifests.shared_pod import EnvSpec
from flows.pipeline.train_templates import ARGO_WORKFLOW_LABEL
from steps.common.config import ConfigError, load_config
from tests.helpers.flow_helpers import (
    CONFIGS,
    VALIDATOR,
    check_golden,
    described_job,
    job_of,
    parameter_values,
    templates,
)
from tests.helpers.job_checks import (
    CLUSTER_YAML,
    NETWORK_CASES,
    NPROC,
    comparable_job,
    network_problems,
)
from tests.helpers.paths import REPO_ROOT

TRAINJOB = "train.launcher=trainjob"
SMOKE = REPO_ROOT / "configs" / "smoke.yaml"
# Kubernetes qualified names: what labels.Parse accepts as a key of Argo's conditions
LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_each_config_trainjob_and_runtime_match_golden(path: Path) -> None:
    cfg = load_config(path, [TRAINJOB])
    job = described_job(cfg)
    check_golden(f"{path.stem}-trainjob", job)
    # and the template's run with its default parameters creates this job
    template = build_template(cfg).to_dict()
    NPROC["auto"] = int(parameter_values(template)["nproc-per-node"])
    assert comparable_job(job_of(template)) == comparable_job(job)
    runtime = trainjob.to_manifest(trainjob.build_runtime(cfg, labels(cfg)))
    check_golden(f"{path.stem}-clustertrainingruntime", runtime)


def test_the_builder_as_data() -> None:
    cfg = load_config(
        SMOKE,
        [
            TRAINJOB,
            "cluster.nodes=2",
            "cluster.gpus_per_node=4",
            "train.nproc_per_node=auto",
            "cluster.nccl_env={}",
            "cluster.job_name_prefix=Train Job",
        ],
    )
    job = trainjob.to_manifest(
        trainjob.build_trainjob(
            cfg, args=["-m", "steps.train"], env=[EnvSpec("A", "1")], labels={"k": "v"}
        )
    )
    c = cfg.cluster
    assert job == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"generateName": "train-job-", "labels": {"k": "v"}},
        "spec": {
            "activeDeadlineSeconds": c.active_deadline_seconds,
            "runtimePatches": [
                {
                    "manager": "cifar-pipeline.io/argo",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {
                                            "spec": {
                                                "template": {"metadata": {"labels": {"k": "v"}}}
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": "cifar-torch-distributed",
            },
            "trainer": {
                "args": ["-m", "steps.train"],
                "command": ["torchrun"],
                "env": [{"name": "A", "value": "1"}],
                "image": cfg.images.image("train"),
                "numNodes": 2,
                "numProcPerNode": 4,
                "resourcesPerNode": {
                    "limits": {"memory": c.memory, "nvidia.com/gpu": "4"},
                    "requests": {"cpu": c.cpu, "memory": c.memory, "nvidia.com/gpu": "4"},
                },
            },
        },
    }


def _runtime_pod(cfg) -> dict[str, Any]:
    runtime = trainjob.to_manifest(trainjob.build_runtime(cfg, {}))
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["name"] == "node"
    return replicated["template"]["spec"]["template"]


def test_the_runtime_is_torch_distributed_made_fit_for_the_pipeline() -> None:
    cfg = load_config(SMOKE, [TRAINJOB, "cluster.pvc=cifar-data"])
    runtime = trainjob.to_manifest(trainjob.build_runtime(cfg, {}))
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 1, "torch": {}}
    assert "podGroupPolicy" not in runtime["spec"]
    pod = _runtime_pod(cfg)
    assert pod["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["name"] == "node"
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]} == {
        "dshm": "/dev/shm",
        "data": "/mnt/cifar",
    }
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] > 0
    assert spec["automountServiceAccountToken"] is False
    assert {v["name"] for v in spec["volumes"]} == {"dshm", "data"}


@pytest.mark.parametrize(
    ("overrides", "policy", "annotations"),
    [
        pytest.param([], None, None, id="none"),
        pytest.param(
            ["cluster.scheduler_name=volcano", "cluster.queue=training"],
            {"volcano": {}},
            {"scheduling.volcano.sh/queue-name": "training"},
            id="volcano",
        ),
        pytest.param(
            ["cluster.scheduler_name=scheduler-plugins-scheduler"],
            {"coscheduling": {"scheduleTimeoutSeconds": 120}},
            None,
            id="coscheduling",
        ),
    ],
)
def test_gang_scheduling_follows_the_scheduler(overrides, policy, annotations) -> None:
    cfg = load_config(SMOKE, [TRAINJOB, *overrides])
    runtime = trainjob.to_manifest(trainjob.build_runtime(cfg, {}))
    assert runtime["spec"].get("podGroupPolicy") == policy
    job = trainjob.to_manifest(trainjob.build_trainjob(cfg, args=[], env=[], labels={}))
    # Trainer v2.3.0 takes the queue from the runtime's JobSet template annotations, which a
    # runtime patch's trainingRuntimeSpec.template.metadata overrides (pkg/runtime/core/
    # trainingruntime.go newRuntimeInfo -> plugins/volcano/volcano.go Build); annotations
    # on the TrainJob's own metadata are never read, and the PodGroup lands in "default"
    (patch,) = job["spec"]["runtimePatches"]
    template = patch["trainingRuntimeSpec"]["template"]
    assert template.get("metadata", {}).get("annotations") == annotations
    assert "annotations" not in job["metadata"]
    scheduler = _runtime_pod(cfg)["spec"].get("schedulerName")
    assert scheduler == cfg.cluster.scheduler_name


@pytest.mark.parametrize(
    ("path", "placement"),
    [
        pytest.param(
            REPO_ROOT / "configs" / "cluster.yaml",
            {
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
            id="gpu-cluster",
        ),
        pytest.param(SMOKE, None, id="cpu-smoke"),
    ],
)
def test_the_trainjob_carries_its_placement_whatever_the_runtime(path, placement) -> None:
    """A GPU config's TrainJob lands on GPU nodes even on a runtime rendered from a CPU
    config: its runtime patch carries the config's nodeSelector and tolerations, which a
    v2.3.0 PodSpecPatch accepts (pkg/apis/trainer/v1alpha1/trainjob_types.go PodSpecPatch;
    it has no priorityClassName or schedulerName: those stay the runtime's)."""
    job = job_of(build_template(load_config(path, [TRAINJOB])).to_dict())
    (patch,) = job["spec"]["runtimePatches"]
    (replicated,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["template"]["spec"]["template"].get("spec") == placement


def _matches(selector: str, obj: dict[str, Any]) -> bool:
    """Argo's resource conditions: every ``key == value`` over a gjson path holds."""
    for requirement in selector.split(","):
        key, value = (part.strip() for part in requirement.split("=="))
        assert LABEL_KEY.fullmatch(key), key  # else labels.Parse refuses the condition
        node: Any = obj
        for part in key.split("."):
            if isinstance(node, list):
                node = node[int(part)] if part.isdigit() and int(part) < len(node) else None
            elif isinstance(node, dict):
                node = node.get(part)
            if node is None:
                return False
        if str(node) != value:
            return False
    return True


@pytest.mark.parametrize(
    ("conditions", "succeeded", "failed"),
    [
        pytest.param([], False, False, id="running"),
        pytest.param([{"type": "Complete", "status": "True"}], True, False, id="complete"),
        pytest.param([{"type": "Failed", "status": "True"}], False, True, id="failed"),
    ],
)
def test_the_step_ends_on_the_trainjobs_terminal_condition(conditions, succeeded, failed) -> None:
    train = templates(build_template(load_config(SMOKE, [TRAINJOB])).to_dict())["train"]
    resource = train["resource"]
    status = {"status": {"conditions": conditions}} if conditions else {"status": {}}
    assert _matches(resource["successCondition"], status) is succeeded
    assert _matches(resource["failureCondition"], status) is failed


def test_the_parameters_size_the_trainjob() -> None:
    template = build_template(load_config(SMOKE, [TRAINJOB])).to_dict()
    job = job_of(template, **{"nodes": "3", "nproc-per-node": "2", "gpus-per-node": "2"})
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 2)
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "2"
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod_labels = patch["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[ARGO_WORKFLOW_LABEL] == "{{workflow.name}}"
    job = job_of(template, epochs="9")  # the steps' config follows the parameters too
    assert "train.epochs=9" in job["spec"]["trainer"]["args"]


def test_more_processes_than_gpus_is_refused() -> None:
    cfg = load_config(SMOKE, [TRAINJOB, "train.nproc_per_node=4", "cluster.gpus_per_node=2"])
    with pytest.raises(ConfigError, match=r"train\.nproc_per_node 4 > cluster\.gpus_per_node 2"):
        build_template(cfg)


@pytest.mark.skipif(not VALIDATOR.is_file(), reason="../shared (the schema validator) is absent")
def test_trainjob_renders_pass_the_strict_schema_check(tmp_path: Path, capsys) -> None:
    files = []
    for path in CONFIGS:
        for extra in (
            [],
            ["cluster.scheduler_name=volcano", "cluster.queue=q", "cluster.pvc=d"],
            ["cluster.rdma=true", "cluster.host_network=true"],
        ):
            cfg = load_config(path, [TRAINJOB, *extra])
            name = f"{path.stem}-{len(extra)}"
            assert (
                cli.main(
                    [
                        "--config",
                        str(path),
                        "--set",
                        TRAINJOB,
                        *[a for e in extra for a in ("--set", e)],
                        "--render-runtime",
                    ],
                    cifar,
                )
                == 0
            )
            files.append(tmp_path / f"{name}-runtime.yaml")
            files[-1].write_text(capsys.readouterr().out)
            files.append(tmp_path / f"{name}-template.yaml")
            files[-1].write_text(build_template(cfg).to_yaml())
            files.append(tmp_path / f"{name}-described-job.yaml")
            files[-1].write_text(yaml.safe_dump(described_job(cfg)))
            files.append(tmp_path / f"{name}-job.yaml")
            files[-1].write_text(yaml.safe_dump(job_of(build_template(cfg).to_dict(), nodes="2")))
    done = subprocess.run(
        [sys.executable, str(VALIDATOR), *map(str, files)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(f"{len(files)} documents checked, 0 problems")
    # inside each WorkflowTemplate: its TrainJob and the InferenceService of deploy and of
    # rollback-apply, their parameters filled with the defaults
    templates_checked = len(files) // 4
    assert f"({3 * templates_checked} job manifests from manifestFrom raw" in done.stdout


def test_a_local_run_of_a_trainjob_config_runs_the_trainjob(monkeypatch, tmp_path) -> None:
    """Locally as on the cluster: the Workflow refers to the WorkflowTemplate, whose train
    step creates the TrainJob (the runner makes it one torchrun; the slow end-to-end run is
    in tests/test_local_templates.py)."""
    seen = {}

    def fake_run_local(
        workflow, *, workflow_templates, parameters, resume=None, **memo_and_closing
    ):
        seen.update(workflow=workflow.to_dict(), templates=workflow_templates)
        return 0

    monkeypatch.setattr("flows.local.run.run_local", fake_run_local)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--config", str(SMOKE), "--set", TRAINJOB], cifar) == 0
    (template,) = seen["templates"]
    ref = seen["workflow"]["spec"]["workflowTemplateRef"]["name"]
    assert ref == template["metadata"]["name"]
    assert job_of(template)["kind"] == "TrainJob"


# --- RDMA and host networking: the TrainJob over its runtime -----------------------------


def effective_node_pod(job: dict[str, Any], runtime: dict[str, Any]) -> tuple[dict, dict]:
    """The node container and pod spec a TrainJob's pods get: the runtime's pod, the
    trainer's env and resourcesPerNode in its container, the patch's container
    securityContext over the runtime's (Trainer v2.3.0 pkg/runtime/core/trainingruntime.go
    mergeRuntimePatches: a strategic merge, containers by name)."""
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    pod_spec = replicated["template"]["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    trainer = job["spec"]["trainer"]
    container = {**container, "env": trainer["env"], "resources": trainer["resourcesPerNode"]}
    (patch,) = job["spec"]["runtimePatches"]
    (patched,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    patched_pod = patched["template"]["spec"]["template"].get("spec") or {}
    for item in patched_pod.get("containers", []):
        assert item["name"] == container["name"] and set(item) == {"name", "securityContext"}
        container["securityContext"] = {**container["securityContext"], **item["securityContext"]}
    return container, pod_spec


@pytest.mark.parametrize("case", NETWORK_CASES)
def test_each_network_option_reaches_the_trainjobs_pods(case: str) -> None:
    """Issue 30, defect 10, for train.launcher=trainjob: the TrainJob the workflow creates
    and the runtime docs/cluster.md renders from the same config; the TrainJob alone already
    locks memory as root (a ContainerPatch takes a securityContext), the node's network is
    the runtime's (a PodSpecPatch has no hostNetwork)."""
    cfg = load_config(CLUSTER_YAML, [TRAINJOB, *NETWORK_CASES[case]])
    job = job_of(build_template(cfg).to_dict())
    runtime = trainjob.to_manifest(trainjob.build_runtime(cfg, labels(cfg)))
    container, pod_spec = effective_node_pod(job, runtime)
    assert network_problems(cfg, container, pod_spec) == []
    # on a runtime rendered without RDMA, the TrainJob still runs its node as it must
    plain = trainjob.to_manifest(trainjob.build_runtime(load_config(CLUSTER_YAML, []), {}))
    container, _ = effective_node_pod(job, plain)
    (runtime_container,) = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"
    ]["template"]["spec"]["containers"]
    assert container["securityContext"] == runtime_container["securityContext"]
