"""The whole pipeline with its live check made to fail: the smoke config run here exactly as
``python flows/cifar.py`` runs it (the WorkflowTemplate and a Workflow referring to it),
against a real SeaweedFS S3 server and a real ``mlflow server``, with one change made by
the task handler (the runner's test seam): serve-check is given a time limit no check can
meet. What follows is the pipeline's own doing: the step fails and moves the alias back,
the DAG's ``rollback-delete`` (a first deployment) deletes the InferenceService, so its
local server is stopped, and ``rollback-apply`` is Skipped (no earlier version). A second
run against a champion it cannot beat leaves the alias where it is: deploy and serve-check
Skipped."""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path

import psutil
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from flows.cifar import build_submission, build_template
from flows.cli import localize
from flows.local.pods.processes import ProcessSpec, SubprocessHandler
from flows.local.status import RunResult
from flows.local.workflow import LocalRunner
from steps.common.config import load_config
from tests.conftest import REPO_ROOT, S3Bucket
from tests.mlflow_server import MLflowServer

pytestmark = pytest.mark.slow
MODEL = "cifar-rollback-test"  # a model no other test registers: this run's is the first


class CheckMadeToFail(SubprocessHandler):
    """Runs every task as the runner would; serve-check with ``--time-limit-s 0.001``."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    def run(self, spec: ProcessSpec, log: Path, tail: deque[str]) -> int:
        if "steps.serve_check" in spec.argv:
            self.checks += 1
            spec.argv = [*spec.argv, "--time-limit-s", "0.001"]
        return super().run(spec, log, tail)


def test_a_failed_live_check_rolls_back_the_first_deployment(
    s3_bucket: S3Bucket, mlflow_server: MLflowServer, tmp_path: Path
) -> None:
    overrides = [
        f"storage.root_uri={s3_bucket.uri}/rollback",
        f"storage.endpoint_url={s3_bucket.server.endpoint}",
        f"tracking.uri={mlflow_server.uri}",
        f"benchmark.registered_model={MODEL}",
    ]
    cwd = tmp_path / "work"
    cwd.mkdir()
    cfg = localize(load_config(REPO_ROOT / "configs" / "smoke.yaml", overrides), cwd)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env |= {"CIFAR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO_ROOT)}
    handler = CheckMadeToFail()

    def run_pipeline(handler: SubprocessHandler) -> RunResult:
        return LocalRunner(
            build_submission(cfg).to_dict(),
            cwd / "runs",
            handler=handler,
            cwd=cwd,
            env=env,
            workflow_templates=[build_template(cfg).to_dict()],
            cache_dir=tmp_path / "cache",
        ).run()

    result = run_pipeline(handler)

    states = {name: task.state.value for name, task in result.tasks.items()}
    # each attempt (the step's retries) failed; the first moved the alias back
    assert handler.checks == result.tasks["serve-check"].attempts >= 1
    assert states["benchmark"] == "Succeeded"
    assert result.tasks["benchmark"].outputs["promoted"] == "true"
    assert result.tasks["benchmark"].outputs["previous-version"] == ""
    assert states["deploy"] == "Succeeded"
    assert states["serve-check"] == "Failed"
    assert states["rollback-delete"] == "Succeeded"
    assert states["rollback-apply"] == "Skipped"
    # Argo's DAG phase is its leaves' (v4.0.5 workflow/controller/dag.go assessDAGPhase), and
    # a Skipped leaf takes its parent's phase (workflow_types.go: Skipped is not Completed):
    # rollback-apply carries serve-check's Failed, so the run ends Failed, rollback or not.
    assert result.status == "Failed"
    check_log = (result.run_dir / "logs" / "serve-check.log").read_text()
    # the time limit ran out while the check waited for the version, or while it measured
    url = result.tasks["deploy"].outputs["url"]
    assert f"serve_check: error: {url}: " in check_log, check_log[-2000:]
    assert f"alias champion of {MODEL} removed" in check_log, check_log[-2000:]

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    version = result.tasks["benchmark"].outputs["model-version"]
    with pytest.raises(MlflowException, match="champion"):
        client.get_model_version_by_alias(MODEL, "champion")
    assert url in client.get_model_version(MODEL, version).tags["serving.rollback"]
    run = client.get_run(result.globals["workflow.outputs.parameters.mlflow-run-id"])
    assert run.info.status == "FAILED"  # the exit handler's close-run, from workflow.status
    assert url in run.data.tags["serving.rollback"]
    assert "**Rollback**" in run.data.tags["mlflow.note.content"]

    # The deleted service's server is gone, and nothing listens on its port.
    state = json.loads((result.run_dir / "state.json").read_text())
    (service,) = state["services"].values()
    assert service["state"] == "Stopped"
    assert not psutil.pid_exists(service["pid"])
    port = int(service["url"].rsplit(":", 1)[1])
    assert all(c.laddr.port != port for c in psutil.net_connections() if c.status == "LISTEN")

    # Run again against a champion no model here can beat (its accuracy tag set by hand to
    # 2): the alias stays where it is, so deploy and serve-check are Skipped, the rollbacks
    # Omitted (their depends never met), nothing is served and the run Succeeds.
    client.set_model_version_tag(MODEL, version, "accuracy", "2.0")
    client.set_registered_model_alias(MODEL, "champion", version)
    again = run_pipeline(SubprocessHandler())
    states = {name: task.state.value for name, task in again.tasks.items()}
    assert again.status == "Succeeded", again.failed_task
    assert again.tasks["benchmark"].outputs["promoted"] == "false"
    assert states["deploy"] == states["serve-check"] == "Skipped"
    assert states["rollback-apply"] == states["rollback-delete"] == "Omitted"
    assert client.get_model_version_by_alias(MODEL, "champion").version == version
    assert json.loads((again.run_dir / "state.json").read_text()).get("services", {}) == {}
