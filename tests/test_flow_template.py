"""The WorkflowTemplate runs the config: with its default parameters every step and the
job get the config's values, and a parameter given at submission changes what it names
(steps' config, the job's size and GPUs, the staging cache key) and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.cifar import build_template
from flows.manifests.shared_pod import config_args
from flows.pipeline.train_templates import ARGO_WORKFLOW_LABEL
from steps.common.config import load_config
from tests.helpers.flow_helpers import (
    CONFIGS,
    argo_substitute,
    described_job,
    job_of,
    parameter_values,
    run_of,
    templates,
    train_tasks,
    when_holds,
)
from tests.helpers.job_checks import GPU, NPROC, comparable_job, config_of, webhook_problems


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_template_with_its_defaults_runs_the_config(path: Path) -> None:
    """A run with the default parameters is the config's pipeline: every step rebuilds the
    config from its arguments, the job that runs is the one the config describes
    (``described_job``: the builders given the config's own values), and one training task
    runs, as ``train``."""
    cfg = load_config(path)
    template = build_template(cfg).to_dict()
    NPROC["auto"] = int(parameter_values(template)["nproc-per-node"])
    run = run_of(cfg)
    found = templates(run)
    assert "train-multinode" not in found and [t["name"] for t in train_tasks(run)] == ["train"]
    own, wanted = config_of(config_args(cfg))
    assert own == []
    steps = {n: t["container"]["args"] for n, t in found.items() if "container" in t}
    assert steps.keys() == {
        "create-run",
        "stage",
        "optimize",
        "benchmark",
        "serve-check",
        "rollback-alias",
        "close-run",
        "reuse-check",
        "restore-champion",
    }
    for name, args in steps.items():
        assert config_of(args)[1] == wanted, name
    assert found["stage"]["memoize"]["key"].startswith("stage-")
    assert comparable_job(job_of(run)) == comparable_job(described_job(cfg))


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
    # flows/pipeline/memo_keys.py: the parameters part, a tag Argo evaluates per run
    assert key.endswith(
        "-p{{=sprig.trunc(12, sprig.sha256sum(workflow.parameters['data-source']))}}"
    )
    args = stage["container"]["args"]
    # the source reaches staging once, through the config, as every step's settings do
    assert "data.source={{workflow.parameters.data-source}}" in args
    assert "--source" not in args and "--dest" not in args


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_rank_logs_to_the_workflow(path: Path) -> None:
    """``argo logs <wf> -c pytorch`` and the UI find pods by the workflow label, in the
    job of either training template (one node, several)."""
    template = build_template(load_config(path)).to_dict()
    for nodes in ("1", "2"):
        job = job_of(template, nodes=nodes)
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
