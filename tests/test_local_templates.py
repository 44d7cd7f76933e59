"""Issue #17's local part: a Workflow from a WorkflowTemplate (workflowTemplateRef) with
``-p`` parameters, a resource manifest from a raw input artifact, and a Kubeflow Trainer
v2 TrainJob run as one torchrun whose ranks really run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.local.checks import UnsupportedFeature
from flows.local.runner import LocalRunner


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
