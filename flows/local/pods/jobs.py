"""Resource templates as local processes: a PyTorchJob (its Master's ``pytorch`` container,
with the ``PET_*`` variables the Training Operator sets for one node) or a Kubeflow Trainer
v2 TrainJob as one ``torchrun``, the manifest inline or from an input artifact's
``raw.data`` (``resource.manifestFrom.artifact``); and the exit handler's delete of that
job, which locally has nothing left to delete. A KServe InferenceService's apply or delete
is a ``ServiceSpec`` for the run's services (``flows.local.pods.services``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from flows.local.errors import UnsupportedFeature
from flows.local.pods.container import OUTPUTS_ENV, container_env, local_argv, template_deadline
from flows.local.pods.manifest import INFERENCESERVICE_API, manifest_of, named, service_delete_name
from flows.local.pods.ports import free_port
from flows.local.pods.processes import ProcessSpec
from flows.local.pods.services import ServiceSpec, service_process

TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"


def resource_process(
    template: Mapping[str, Any],
    task_dir: Path,
    cwd: Path,
    env: Mapping[str, str],
    port_for: Callable[[str], int] = lambda name: free_port(),
) -> tuple[ProcessSpec, dict | None]:
    """``port_for``: an InferenceService's local port by its name."""
    if template["resource"].get("action") == "delete":
        name = service_delete_name(template["resource"])
        if name is not None:
            return ServiceSpec([], dict(env), cwd, name=name, delete=True), None
        return delete_process(template, cwd, env), None
    text = manifest_of(template)
    if not text:
        name = template["resource"].get("manifestFrom", {}).get("artifact", {}).get("name")
        raise UnsupportedFeature(f"template {template.get('name')}: no raw input artifact {name!r}")
    job = yaml.safe_load(text)
    if job.get("kind") == "InferenceService" and job.get("apiVersion") == INFERENCESERVICE_API:
        return service_process(job, template, cwd, env, port_for)
    if job.get("kind") == "TrainJob" and job.get("apiVersion") == TRAINJOB_API:
        return trainjob_process(job, task_dir, cwd, env)
    inline = {**template, "resource": {**template["resource"], "manifest": text}}
    return pytorchjob_process(inline, task_dir, cwd, env)


def delete_process(template: Mapping[str, Any], cwd: Path, env: Mapping[str, str]) -> ProcessSpec:
    """``kubectl delete --ignore-not-found <job resource> --selector <workflow label>`` as
    Argo runs it, here: the run's job was a torchrun process that has ended, so the delete
    finds nothing and succeeds, as ``--ignore-not-found`` does (checks.resources.delete_problems
    refuses any other delete up front)."""
    what = " ".join(template["resource"]["flags"])
    message = f"delete {what}: nothing to delete (a local job ends with its torchrun)"
    return ProcessSpec([sys.executable, "-c", f"print({message!r})"], dict(env), cwd)


def finished_status(job: Mapping[str, Any]) -> dict[str, Any]:
    """The status the operator reports for a job that completed (for jsonPath outputs)."""
    if job.get("kind") == "InferenceService":  # set when its process was started
        return dict(job.get("status", {}))
    if job.get("kind") == "TrainJob":
        return {"conditions": [{"type": "Complete", "status": "True"}]}
    return {"replicaStatuses": {"Master": {"succeeded": 1}}}


def trainjob_process(
    job: dict[str, Any], task_dir: Path, cwd: Path, base_env: Mapping[str, str]
) -> tuple[ProcessSpec, dict]:
    """All ``numNodes`` x ``numProcPerNode`` ranks as one torchrun on this node, with the
    ``PET_*`` variables Trainer's torch plugin sets (torchrun reads them as its options).
    A command that is not torchrun runs once per rank (``torchrun --no-python``)."""
    trainer = job.get("spec", {}).get("trainer", {})
    nodes = int(trainer.get("numNodes", 1))
    nproc = processes_per_node(trainer.get("numProcPerNode"))
    env = container_env(trainer, base_env)  # trainer.env is a container's env list
    env.update(single_node_env(nodes * nproc, task_dir))
    argv = [*trainer.get("command", []), *trainer.get("args", [])]
    if not argv:
        raise UnsupportedFeature("TrainJob without trainer.command (the runtime's is not known)")
    if PurePosixPath(argv[0]).name != "torchrun":
        argv = ["torchrun", "--no-python", *argv]
    return ProcessSpec(local_argv(argv), env, cwd), named(job, "trainjob-")


def single_node_env(nproc: int, task_dir: Path) -> dict[str, str]:
    """The ``PET_*`` torchrun options of a one-node job (the operators set them per node),
    and where rank 0 leaves its results (test accuracy, busy time) for the local summary:
    not set by an operator."""
    return {
        "PET_NNODES": "1",
        "PET_NODE_RANK": "0",
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(free_port()),
        OUTPUTS_ENV: str(task_dir / "outputs"),
    }


def processes_per_node(value: Any) -> int:
    """``nprocPerNode`` as torchrun takes it; ``auto``: the GPUs present, else 1."""
    if value in (None, "", "auto"):
        try:
            import torch

            return max(torch.cuda.device_count(), 1)
        except ImportError:
            return 1
    if str(value) in ("gpu", "cpu"):
        raise UnsupportedFeature(f"nprocPerNode {value!r} (use a number or auto)")
    return int(value)


def pytorchjob_process(
    template: Mapping[str, Any], task_dir: Path, cwd: Path, base_env: Mapping[str, str]
) -> tuple[ProcessSpec, dict]:
    """The Master's ``pytorch`` container as one node of the job: the torchrun launch
    the Training Operator would make, with ``PET_*`` for a single node."""
    job = yaml.safe_load(template["resource"]["manifest"])
    specs = job.get("spec", {}).get("pytorchReplicaSpecs", {})
    master = specs.get("Master")
    if not master:
        raise UnsupportedFeature("PyTorchJob without a Master replica")
    containers = master["template"]["spec"]["containers"]
    container = next((c for c in containers if c.get("name") == "pytorch"), None)
    if container is None:
        raise UnsupportedFeature("PyTorchJob Master without a container named pytorch")
    nproc = processes_per_node(job["spec"].get("nprocPerNode"))
    env = container_env(container, base_env)
    env.update(single_node_env(nproc, task_dir), MASTER_ADDR="127.0.0.1")
    argv = [*container.get("command", []), *container.get("args", [])]
    if argv and PurePosixPath(argv[0]).name != "torchrun":
        raise UnsupportedFeature(
            f"PyTorchJob command {argv[0]!r} (the local runner launches torchrun)"
        )
    deadline = job["spec"].get("runPolicy", {}).get("activeDeadlineSeconds")
    spec = ProcessSpec(
        local_argv(argv), env, cwd, float(deadline) if deadline else template_deadline(template)
    )
    return spec, named(job, "pytorchjob-")
