"""Issue #17's local part: a Workflow from a WorkflowTemplate (workflowTemplateRef) with
``-p`` parameters, a resource manifest from a raw input artifact, and a Kubeflow Trainer
v2 TrainJob run as one torchrun whose ranks really run."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.local.errors import UnsupportedFeature
from flows.local.workflow import LocalRunner


def template(tmp_path: Path) -> dict[str, Any]:
    words = "{{workflow.parameters.greeting}}-{{workflow.parameters.who}}"
    say = f"echo {words} > {tmp_path}/said"
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "greet"},
        "spec": {
            "entrypoint": "main",
            "arguments": {
                "parameters": [
                    {"name": "greeting", "value": "hello"},
                    {"name": "who", "value": "world"},
                ]
            },
            "templates": [
                {"name": "main", "dag": {"tasks": [{"name": "say", "template": "say"}]}},
                {"name": "say", "container": {"image": "i", "command": ["sh", "-c", say]}},
            ],
        },
    }


def from_template(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {"workflowTemplateRef": {"name": "greet"}, **spec},
    }


@pytest.mark.parametrize(
    ("own", "parameters", "said"),
    [
        ({}, None, "hello-world"),
        ({"arguments": {"parameters": [{"name": "who", "value": "argo"}]}}, None, "hello-argo"),
        (
            {"arguments": {"parameters": [{"name": "who", "value": "argo"}]}},
            {"who": "cli"},
            "hello-cli",
        ),
        ({}, {"greeting": "hi"}, "hi-world"),
    ],
)
def test_workflow_template_ref_with_arguments_and_parameters(
    tmp_path, own, parameters, said
) -> None:
    runner = LocalRunner(
        from_template(**own),
        tmp_path / "runs",
        cache_dir=tmp_path / "cache",
        workflow_templates=[template(tmp_path)],
        parameters=parameters,
    )
    result = runner.run()
    assert result.status == "Succeeded"
    assert (tmp_path / "said").read_text().strip() == said


def test_a_missing_workflow_template_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(
        UnsupportedFeature, match="workflowTemplateRef 'greet': no such WorkflowTemplate"
    ):
        LocalRunner(from_template(), tmp_path / "runs", workflow_templates=[])


def test_a_parameter_the_workflow_does_not_declare_is_added_as_argo_submit_p_does(
    tmp_path: Path,
) -> None:
    runner = LocalRunner(
        from_template(),
        tmp_path / "runs",
        workflow_templates=[template(tmp_path)],
        parameters={"extra": "1"},
    )
    assert runner.globals["workflow.parameters.extra"] == "1"


def rank_script(tmp_path: Path) -> str:
    return (
        "import os, pathlib; "
        f"pathlib.Path('{tmp_path}/rank-' + os.environ['RANK']).write_text("
        "os.environ['WORLD_SIZE'] + ' ' + os.environ['MASTER_ADDR'])"
    )


def trainjob(tmp_path: Path, nodes: int, nproc: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"generateName": "train-"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": nodes,
                "numProcPerNode": nproc,
                "command": ["python", "-c", rank_script(tmp_path)],
                "env": [{"name": "CIFAR_TEST", "value": "1"}],
            },
        },
    }


def resource_workflow(resource_template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "tj"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": [{"name": "train", "template": "train"}]}},
                resource_template,
            ],
        },
    }


@pytest.mark.parametrize("manifest_from", [False, True])
def test_a_trainjob_runs_as_one_torchrun_with_all_its_ranks(
    tmp_path: Path, manifest_from: bool
) -> None:
    text = yaml.safe_dump(trainjob(tmp_path, nodes=1, nproc=2))
    outputs = {"parameters": [{"name": "name", "valueFrom": {"jsonPath": "{.metadata.name}"}}]}
    if manifest_from:
        resource = {
            "name": "train",
            "inputs": {"artifacts": [{"name": "job", "raw": {"data": text}}]},
            "resource": {"action": "create", "manifestFrom": {"artifact": {"name": "job"}}},
            "outputs": outputs,
        }
    else:
        resource = {
            "name": "train",
            "resource": {"action": "create", "manifest": text},
            "outputs": outputs,
        }
    result = LocalRunner(
        resource_workflow(resource), tmp_path / "runs", cache_dir=tmp_path / "c"
    ).run()
    assert result.status == "Succeeded", list(result.tasks["train"].tail)
    assert sorted(p.name for p in tmp_path.glob("rank-*")) == ["rank-0", "rank-1"]
    assert (tmp_path / "rank-1").read_text() == "2 127.0.0.1"
    assert result.tasks["train"].outputs["name"].startswith("train-")


def test_a_resource_other_than_a_training_job_is_refused(tmp_path: Path) -> None:
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    resource = {"name": "train", "resource": {"action": "create", "manifest": text}}
    with pytest.raises(UnsupportedFeature, match="a manifest other than a PyTorchJob or TrainJob"):
        LocalRunner(resource_workflow(resource), tmp_path / "runs")


def test_the_pipeline_template_expressions_evaluate_as_argo_would(tmp_path: Path) -> None:
    """flows/pipeline/memo_keys.py's keys hash the parameters and inputs with Sprig (what its
    ``part`` computes), and flows/pipeline/train_templates.py's multi-node job counts Workers as
    {{=asInt(nodes) - 1}}."""
    from flows.cifar import build_submission, build_template
    from flows.local.nodes.scope import scope_of
    from flows.local.substitution import substitute
    from flows.pipeline import memo_keys
    from steps.common.config import REPO_ROOT, load_config
    from tests.helpers.flow_helpers import parameter_values

    cfg = load_config(REPO_ROOT / "configs" / "smoke.yaml")
    values = {"nodes": "3", "data-source": "synthetic:64"}
    runner = LocalRunner(
        build_submission(cfg, values).to_dict(),
        tmp_path / "runs",
        workflow_templates=[build_template(cfg).to_dict()],
        parameters=values,
    )
    scope = scope_of(
        runner.state, {f"inputs.parameters.{n}": n for n in ("dataset-uri", "model-uri", "run-id")}
    )
    key = substitute(runner.templates["stage"]["memoize"]["key"], scope)
    assert key.endswith("-p" + hashlib.sha256(b"synthetic:64").hexdigest()[:12])
    train_key = substitute(runner.templates["train"]["memoize"]["key"], scope)
    given = parameter_values(build_template(cfg).to_dict(), **values)
    used = [given[p] for p in memo_keys.STEPS["train"].params]
    assert train_key.endswith(f"-p{memo_keys.part(used)}-u{memo_keys.part(['dataset-uri'])}")
    manifest = yaml.safe_load(
        substitute(
            runner.templates["train-multinode"]["inputs"]["artifacts"][0]["raw"]["data"], scope
        )
    )
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)


@pytest.mark.slow
def test_a_local_run_of_the_pipeline_with_the_trainjob_launcher(tmp_path: Path) -> None:
    """python flows/cifar.py with train.launcher=trainjob (smoke config, made small: this
    is about the launcher) runs the WorkflowTemplate that --submit applies: train is a
    TrainJob run as one torchrun."""
    import json
    import os
    import subprocess
    import sys

    from flows.pipeline.memo_keys import STEPS as MEMOIZED
    from steps.common.config import REPO_ROOT
    from tests.helpers.pipeline_runs import SMALL, sets

    smoke = REPO_ROOT / "configs" / "smoke.yaml"
    argv = [sys.executable, str(REPO_ROOT / "flows" / "cifar.py"), "--config", str(smoke)]
    argv += ["--set", "train.launcher=trainjob", *sets(SMALL), "-p", "nodes=1"]
    env = {**os.environ, "CIFAR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    state = json.loads((run_dir / "state.json").read_text())
    tasks = state["tasks"]
    assert {t: tasks[t]["state"] for t in tasks} == {
        **dict.fromkeys(
            ["create-run", "stage", "train", "optimize", "benchmark", "onExit.close-run"],
            "Succeeded",
        ),
        # a fresh MLflow store: the first champion is deployed and checked live
        **dict.fromkeys(["deploy", "serve-check"], "Succeeded"),
        **dict.fromkeys(["rollback-alias", "rollback-apply", "rollback-delete"], "Omitted"),
        "onExit.delete-train-job": "Skipped",  # the workflow Succeeded: nothing to clean up
        # the workflow Succeeded: the champion stands checked, nothing to restore
        "onExit.restore-champion": "Skipped",
        **dict.fromkeys(["onExit.restore-apply", "onExit.restore-delete"], "Omitted"),
        # a fresh memo cache: no hit to check, nothing to run again
        # (flows/pipeline/reuse_templates.py)
        **{f"{step}-{what}": "Skipped" for step in MEMOIZED for what in ("reused", "again")},
    }
    assert tasks["train"]["outputs"]["job-name"].startswith("cifar-train-")
    manifest = state["manifest"]  # the Workflow joined with the template, -p first
    assert manifest["spec"]["arguments"]["parameters"][0] == {"name": "nodes", "value": "1"}
    assert "-m torch.distributed.run" in (run_dir / "logs" / "train.log").read_text()
    train = next(t for t in manifest["spec"]["templates"] if t["name"] == "train")
    assert "kind: TrainJob" in train["inputs"]["artifacts"][0]["raw"]["data"]
    assert state["exit_handler"]["state"] == "Succeeded"


@pytest.mark.parametrize("config", ["local", "smoke", "cluster", "kind"])
@pytest.mark.parametrize("launcher", ["pytorchjob", "trainjob"])
def test_the_runner_accepts_the_pipeline_template_of_every_config(
    config: str, launcher: str
) -> None:
    """What a local run executes (the Workflow of the WorkflowTemplate) passes every check:
    its {{=...}} expressions included."""
    from flows.cifar import build_submission, build_template
    from flows.local.checks.fields import unsupported
    from flows.local.checks.lint import lint
    from flows.local.template_ref import resolve
    from steps.common.config import REPO_ROOT, load_config

    cfg = load_config(REPO_ROOT / "configs" / f"{config}.yaml", [f"train.launcher={launcher}"])
    template = build_template(cfg).to_dict()
    manifest = resolve(build_submission(cfg, {"nodes": "2"}).to_dict(), [template], {"nodes": "2"})
    assert unsupported(manifest) + lint(manifest) == []
    assert any("{{=" in str(t.get("memoize", "")) for t in manifest["spec"]["templates"])
