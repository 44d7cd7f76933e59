"""The WorkflowTemplate runs what the inline workflow runs: with its default parameters it
is the same pipeline, and a parameter given at submission changes what it names (steps'
config, the job's size and GPUs, the staging cache key) and nothing else."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.cifar import build_template, build_workflow
from flows.train_step import ARGO_WORKFLOW_LABEL
from steps.common.config import load_config
from tests.test_flow import (
    CONFIGS,
    argo_substitute,
    job_of,
    parameter_values,
    templates,
    train_tasks,
    when_holds,
)
from tests.test_pytorchjob import webhook_problems

GPU = "nvidia.com/gpu"


NPROC: dict[str, int] = {}  # the template resolves nproc_per_node=auto (set per test)


def _config_of(args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """A step's own arguments, and the config its ``--set`` arguments rebuild; ``auto``
    processes per node as the template resolves them."""
    own, overrides, rest = [], [], iter(args)
    for arg in rest:
        if arg == "--set":
            overrides.append(next(rest))
        else:
            own.append(arg)
    config = load_config(None, overrides).model_dump(mode="json")
    if config["train"]["nproc_per_node"] == "auto":
        config["train"]["nproc_per_node"] = NPROC["auto"]
    return own, config


def _normalized(template: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(template)
    if "container" in template:
        args = template["container"]["args"]
        template["container"]["args"] = _config_of(args)
    resource = template.get("resource", {})
    if "manifestFrom" in resource:  # the WorkflowTemplate's form of an inline manifest
        (artifact,) = template["inputs"].pop("artifacts")
        resource.pop("manifestFrom")
        resource["manifest"] = artifact["raw"]["data"]
    if "manifest" in resource:
        manifest = yaml.safe_load(resource["manifest"])
        for container in _walk_containers(manifest):
            container["args"] = _config_of(container["args"])
        resource["manifest"] = manifest
    return template


def _walk_containers(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [c for item in node for c in _walk_containers(item)]
    if not isinstance(node, dict):
        return []
    found = [c for c in node.get("containers", []) if "args" in c]
    return found + [c for v in node.values() for c in _walk_containers(v)]


def _without_job_details(job: dict[str, Any]) -> dict[str, Any]:
    """What may differ between the two forms of the same job: the name's room for larger
    jobs, and a request for zero GPUs."""
    job = copy.deepcopy(job)
    job["metadata"].pop("generateName")
    specs = job["spec"]["pytorchReplicaSpecs"]
    for replica in specs.values():
        resources = replica["template"]["spec"]["containers"][0]["resources"]
        for part in resources.values():
            if part.get(GPU) == "0":
                del part[GPU]
    return job


def _run_as_argo_would(found: dict[str, dict[str, Any]], entrypoint: str) -> None:
    """Drop the tasks whose ``when`` is false (Argo skips them; a plain dependency on a
    Skipped task holds) and their templates, so the DAG reads as the inline one."""
    dag = found[entrypoint]["dag"]
    # a `when` on the workflow's parameters is decided here; one on a task's outputs
    # (deploy's on the benchmark's decision) is the same in both and stays
    static = [t for t in dag["tasks"] if "when" in t and "{{tasks." not in t["when"]]
    skipped = {t["name"] for t in static if not when_holds(t["when"])}
    dag["tasks"] = [t for t in dag["tasks"] if t["name"] not in skipped]
    for task in static:
        task.pop("when")
    for task in dag["tasks"]:
        if "depends" in task:
            names = [n.strip() for n in task["depends"].split("&&")]
            task["depends"] = " && ".join(n for n in names if n not in skipped)
    for name in skipped:
        del found[name]
    if "train-multinode" in found:  # the inline workflow's job has its size written in
        found["train"] = {**found.pop("train-multinode"), "name": "train"}
        for task in dag["tasks"]:
            for key in ("name", "template", "depends"):
                if key in task:
                    task[key] = re.sub(r"\btrain-multinode\b", "train", task[key])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_template_with_its_defaults_is_the_inline_workflow(path: Path) -> None:
    cfg = load_config(path)
    template, inline = build_template(cfg).to_dict(), build_workflow(cfg).to_dict()
    values = parameter_values(template)
    NPROC["auto"] = int(values["nproc-per-node"])
    resolved = yaml.safe_load(argo_substitute(yaml.safe_dump(template), values))
    mine, theirs = templates(resolved), templates(inline)
    _run_as_argo_would(mine, template["spec"]["entrypoint"])
    assert mine.keys() == theirs.keys()
    for name in mine.keys() - {"train", "stage"}:
        assert _normalized(mine[name]) == _normalized(theirs[name]), name
    stage, inline_stage = mine["stage"], theirs["stage"]
    assert stage.pop("memoize")["key"].startswith("stage-")
    inline_stage.pop("memoize")
    assert _normalized(stage) == _normalized(inline_stage)
    jobs = [_without_job_details(job_of(wf)) for wf in (template, inline)]
    for job in jobs:
        for replica in job["spec"]["pytorchReplicaSpecs"].values():
            container = replica["template"]["spec"]["containers"][0]
            container["args"] = _config_of(container["args"])
    assert jobs[0] == jobs[1]


def test_a_given_parameter_changes_the_steps_and_the_job() -> None:
    cfg = load_config(CONFIGS[0])
    template = build_template(cfg).to_dict()
    given = {"epochs": "9", "nodes": "3", "gpus-per-node": "2", "nproc-per-node": "2"}
    text = argo_substitute(yaml.safe_dump(template), parameter_values(template, **given))
    create_run = templates(yaml.safe_load(text))["create-run"]["container"]["args"]
    assert "train.epochs=9" in create_run and "train.nproc_per_node=2" in create_run
    job = job_of(template, **given)
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 2)
    assert job["spec"]["nprocPerNode"] == "2"
    for replica in specs.values():
        container = replica["template"]["spec"]["containers"][0]
        assert container["resources"]["limits"][GPU] == "2"
        assert "train.epochs=9" in container["args"]


def test_a_gang_of_every_pod_follows_nodes() -> None:
    cfg = load_config(CONFIGS[0], ["cluster.scheduler_name=volcano", "cluster.elastic_min_nodes=1"])
    template = build_template(cfg).to_dict()
    job = job_of(template, nodes="4")
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 4
    assert job["spec"]["elasticPolicy"]["maxReplicas"] == 4
    pinned = build_template(
        load_config(CONFIGS[0], ["cluster.scheduler_name=volcano", "cluster.min_available=2"])
    ).to_dict()
    assert job_of(pinned, nodes="4")["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2


def test_the_staging_cache_key_is_hashed_from_the_source_parameter() -> None:
    stage = templates(build_template(load_config(CONFIGS[0])).to_dict())["stage"]
    key = stage["memoize"]["key"]
    assert key.endswith("{{=sprig.trunc(16, sprig.sha256sum(workflow.parameters['data-source']))}}")
    args = stage["container"]["args"]
    # the source reaches staging once, through the config, as every step's settings do
    assert "data.source={{workflow.parameters.data-source}}" in args
    assert "--source" not in args and "--dest" not in args


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_rank_logs_to_the_workflow(path: Path) -> None:
    """``argo logs <wf> -c pytorch`` and the UI find pods by the workflow label."""
    for doc in (build_template(load_config(path)), build_workflow(load_config(path))):
        job = job_of(doc.to_dict())
        for replica in job["spec"]["pytorchReplicaSpecs"].values():
            pod_labels = replica["template"]["metadata"]["labels"]
            assert pod_labels[ARGO_WORKFLOW_LABEL] == "{{workflow.name}}"
            assert replica["template"]["spec"]["containers"][0]["name"] == "pytorch"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_the_job_of_any_size_passes_the_operators_webhook(path: Path, nodes: int) -> None:
    """Training Operator v1.9 refuses a Worker replica of 0 (pytorchjob_webhook.go: "must
    be at least 1"): one node runs ``train`` (the Master alone), more run
    ``train-multinode``; exactly one of them runs for each size."""
    cfg = load_config(path)
    template = build_template(cfg).to_dict()
    if cfg.train.launcher != "pytorchjob":
        pytest.skip("a TrainJob has numNodes, no replica types")
    values = parameter_values(template, nodes=str(nodes))
    ran = [
        t["name"] for t in train_tasks(template) if when_holds(argo_substitute(t["when"], values))
    ]
    assert ran == (["train"] if nodes == 1 else ["train-multinode"])
    job = job_of(template, nodes=str(nodes))
    assert webhook_problems(job) == []
    counts = {k: v["replicas"] for k, v in job["spec"]["pytorchReplicaSpecs"].items()}
    assert counts == ({"Master": 1} if nodes == 1 else {"Master": 1, "Worker": nodes - 1})
