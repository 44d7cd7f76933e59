"""Resource templates as local processes: a PyTorchJob (``flows.local.pods.container``) or a
Kubeflow Trainer v2 TrainJob as one ``torchrun``, the manifest inline or from an input
artifact's ``raw.data`` (``resource.manifestFrom.artifact``); and the exit handler's
delete of that job, which locally has nothing left to delete. A KServe InferenceService's
apply or delete is a ``ServiceSpec`` for the run's services (``flows.local.pods.services``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from flows.local.checks.resources import INFERENCESERVICE_API, service_delete_name
from flows.local.errors import UnsupportedFeature
from flows.local.pods.container import (
    container_env,
    free_port,
    local_argv,
    named,
    processes_per_node,
    pytorchjob_process,
    single_node_env,
)
from flows.local.pods.processes import ProcessSpec
from flows.local.pods.services import ServiceSpec, service_process

TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"


def manifest_text(template: Mapping[str, Any]) -> str:
    """The resource's manifest: inline, or the raw input artifact ``manifestFrom`` names."""
    resource = template["resource"]
    if "manifest" in resource:
        return resource["manifest"]
    name = resource.get("manifestFrom", {}).get("artifact", {}).get("name")
    for artifact in template.get("inputs", {}).get("artifacts", []):
        if artifact.get("name") == name and "raw" in artifact:
            return artifact["raw"]["data"]
    raise UnsupportedFeature(f"template {template.get('name')}: no raw input artifact {name!r}")


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
    text = manifest_text(template)
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
