"""The exit handler's delete of the run's training job, run locally: the pipeline deletes
its PyTorchJob / TrainJob by Argo's workflow label when the workflow did not succeed
(flows/pipeline/train_templates.py delete_template). Locally that job was a torchrun that
has ended, so the delete finds nothing and succeeds, as Argo's ``kubectl delete --ignore-not-found``
does (argo-workflows v4.0.5 workflow/executor/resource.go getKubectlArguments); every
other delete is still refused by name before anything starts."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from flows.local.checks.fields import unsupported
from flows.local.errors import UnsupportedFeature
from flows.local.workflow import LocalRunner

SELECTOR = "workflows.argoproj.io/workflow={{workflow.name}}"
DELETABLE = "pytorchjobs.kubeflow.org"


def workflow(delete: dict[str, Any], *, main_exit: int) -> dict[str, Any]:
    """A one-pod workflow ending with ``main_exit``, whose exit handler runs ``delete``
    unless the workflow Succeeded, as flows/cifar.py's exit handler does."""
    code = f"import sys; sys.exit({main_exit})"
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "del"},
        "spec": {
            "entrypoint": "main",
            "onExit": "exit-handler",
            "templates": [
                {
                    "name": "main",
                    "container": {"image": "i", "command": [sys.executable, "-c", code]},
                },
                {"name": "delete-train-job", "resource": delete},
                {
                    "name": "exit-handler",
                    "dag": {
                        "tasks": [
                            {
                                "name": "delete-train-job",
                                "template": "delete-train-job",
                                "when": "{{workflow.status}} != Succeeded",
                            }
                        ]
                    },
                },
            ],
        },
    }


@pytest.mark.parametrize("job", ["pytorchjobs.kubeflow.org", "trainjobs.trainer.kubeflow.org"])
@pytest.mark.parametrize(("main_exit", "deleted"), [(1, True), (0, False)], ids=["failed", "ok"])
def test_the_exit_handler_deletes_the_job_locally_as_a_no_op(
    tmp_path: Path, job: str, main_exit: int, deleted: bool
) -> None:
    delete = {"action": "delete", "flags": [job, "--selector", SELECTOR]}
    runner = LocalRunner(workflow(delete, main_exit=main_exit), tmp_path / "runs")
    result = runner.run()
    assert result.status == ("Failed" if main_exit else "Succeeded")
    record = runner.tasks.get("onExit.delete-train-job")
    assert runner.exit_task is not None and runner.exit_task.state.value == "Succeeded"
    assert record is not None
    assert record.state.value == ("Succeeded" if deleted else "Skipped")
    if deleted:
        assert any(
            f"delete {job} --selector workflows.argoproj.io/workflow=del: nothing to delete" in line
            for line in record.tail
        ), list(record.tail)


@pytest.mark.parametrize(
    ("delete", "match"),
    [
        pytest.param(
            {"action": "delete", "flags": ["configmaps", "--selector", SELECTOR]},
            r"a delete other than of the run's pytorchjobs",
            id="other-kind",
        ),
        pytest.param(
            {"action": "delete", "flags": ["pytorchjobs.kubeflow.org", "--all", "x"]},
            r"a delete by other than --selector workflows",
            id="every-job",
        ),
        pytest.param(
            {"action": "delete", "manifest": "kind: PyTorchJob\nmetadata: {name: x}\n"},
            r"a delete other than of the run's",
            id="by-manifest",
        ),
        pytest.param(
            {"action": "create", "flags": ["x"], "manifest": "kind: PyTorchJob\n"},
            r"resource: flags",
            id="create-with-flags",
        ),
        pytest.param(
            {"action": "patch", "flags": ["pytorchjobs.kubeflow.org"]},
            r"resource: action 'patch'",
            id="patch",
        ),
    ],
)
def test_every_other_delete_is_refused_by_name(
    tmp_path: Path, delete: dict[str, Any], match: str
) -> None:
    manifest = workflow(delete, main_exit=1)
    assert any(re.search(match, p) for p in unsupported(manifest)), unsupported(manifest)
    with pytest.raises(UnsupportedFeature, match=match):
        LocalRunner(manifest, tmp_path / "runs")


def test_a_resumed_run_runs_its_exit_handler_again_whole(tmp_path: Path) -> None:
    """A DAG exit handler's children are not kept on resume: `argo retry` deletes every
    node under <wf>.onExit (argo-workflows v4.0.5 workflow/util/util.go
    FormulateRetryWorkflow), so the pipeline's close-run ends the resumed MLflow run."""
    flag = tmp_path / "ok"
    code = f"import pathlib, sys; sys.exit(0 if pathlib.Path({str(flag)!r}).exists() else 1)"
    delete = {"action": "delete", "flags": [DELETABLE, "--selector", SELECTOR]}
    manifest = workflow(delete, main_exit=0)
    manifest["spec"]["templates"][0]["container"]["command"] = [sys.executable, "-c", code]
    handler = manifest["spec"]["templates"][2]["dag"]["tasks"]
    handler.append({"name": "always", "template": "main"})  # exits as main does
    first = LocalRunner(manifest, tmp_path / "runs")
    assert first.run().status == "Failed"
    assert first.tasks["onExit.delete-train-job"].state.value == "Succeeded"
    flag.touch()
    resumed = LocalRunner.resume(first.run_dir)
    assert resumed.run().status == "Succeeded"
    assert resumed.tasks["onExit.delete-train-job"].state.value == "Skipped"  # ran again
    assert resumed.tasks["onExit.always"].message != "kept from the earlier run"
