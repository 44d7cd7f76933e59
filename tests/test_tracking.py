"""MLflow helpers and the workflow's run CLI against a real ``mlflow server`` on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from flows.local.servers.mlflow_server import MLflowServer
from flows.local.servers.seaweedfs import free_port
from steps.common.config import TrackingConfig, load_config
from steps.common.pipeline_run import TrackingError, open_run, run_url, wait_until_reachable
from steps.tracking import end_pipeline_run, start_pipeline_run
from tests.helpers.paths import REPO_ROOT


def tracking_cli(*args: str, server: MLflowServer) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "steps.tracking", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "MLFLOW_TRACKING_URI": server.uri},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tracking_env(mlflow_server: MLflowServer, monkeypatch: pytest.MonkeyPatch) -> MLflowServer:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    return mlflow_server


def test_start_creates_a_tagged_run_and_writes_its_id(mlflow_server, tmp_path: Path) -> None:
    started = tracking_cli(
        "start",
        "--run-name",
        "wf-abc12",
        "--tag",
        "argo.workflow=wf-abc12",
        "--set",
        "tracking.experiment=test-tracking-cli",
        "--outputs-dir",
        str(tmp_path),
        server=mlflow_server,
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    assert (tmp_path / "run_id").read_text() == run_id
    assert run_id in (tmp_path / "run_url").read_text()
    run = mlflow.MlflowClient(mlflow_server.uri).get_run(run_id)
    assert run.info.status == "RUNNING"
    assert run.info.run_name == "wf-abc12"
    assert run.data.tags["argo.workflow"] == "wf-abc12"
    assert run.data.tags["pipeline"] == "cifar-pipeline"
    experiment = mlflow.MlflowClient(mlflow_server.uri).get_experiment(run.info.experiment_id)
    assert experiment.name == "test-tracking-cli"


@pytest.mark.parametrize(
    ("argo_status", "mlflow_status"),
    [
        ("Succeeded", "FINISHED"),
        ("Failed", "FAILED"),
        ("Error", "FAILED"),
        ("Terminated", "KILLED"),
        ("Running", "KILLED"),
    ],
)
def test_end_maps_the_workflow_status(tracking_env, argo_status: str, mlflow_status: str) -> None:
    cfg = load_config(None, ["tracking.experiment=test-tracking-end"])
    run = start_pipeline_run(cfg, f"wf-{argo_status.lower()}")
    url = "https://argo.example/workflows/argo/wf-1"
    assert end_pipeline_run(cfg, run.run_id, argo_status, url) == mlflow_status
    ended = mlflow.MlflowClient(tracking_env.uri).get_run(run.run_id)
    assert ended.info.status == mlflow_status
    assert ended.data.tags["argo.status"] == argo_status
    assert ended.data.tags["argo.workflow_url"] == url


@pytest.mark.parametrize(
    ("url", "stopped"),
    [
        ("http://127.0.0.1:41234", True),  # the local runner's InferenceService
        ("http://cifar10-classifier.argo.svc.cluster.local", False),  # KServe's
    ],
    ids=["local", "cluster"],
)
def test_end_says_a_local_endpoint_stopped_with_the_run(tracking_env, url, stopped) -> None:
    """A local run's endpoint goes with the run: its description says so once, however
    often the run is closed (a --resume closes it again)."""
    cfg = load_config(None, ["tracking.experiment=test-tracking-stopped"])
    run = start_pipeline_run(cfg, "wf-served")
    client = mlflow.MlflowClient(tracking_env.uri)
    endpoint = f"**Endpoint** `{url}`: live check passed"
    client.set_tag(run.run_id, "serving.url", url)
    client.set_tag(run.run_id, "mlflow.note.content", f"**Test accuracy** 1.0\n\n{endpoint}")
    for _ in range(2):
        end_pipeline_run(cfg, run.run_id, "Succeeded")
    note = client.get_run(run.run_id).data.tags["mlflow.note.content"]
    lines = note.splitlines()
    assert lines[:3] == ["**Test accuracy** 1.0", "", endpoint]
    if stopped:
        assert lines[3:] == [
            "",
            f"**Stopped** `{url}` was this local run's server: it stopped when the run ended "
            "(`flows/cifar.py serve` serves the champion again)",
        ]
    else:
        assert lines[3:] == []


def test_end_cli_rejects_an_unknown_status(mlflow_server) -> None:
    ended = tracking_cli("end", "--run-id", "x", "--status", "Finished", server=mlflow_server)
    assert ended.returncode == 2
    assert "invalid choice: 'Finished'" in ended.stderr


def test_end_cli_of_a_missing_run_is_one_line(mlflow_server) -> None:
    ended = tracking_cli("end", "--run-id", "0" * 32, "--status", "Failed", server=mlflow_server)
    assert ended.returncode == 1
    assert ended.stderr.strip().count("\n") == 0
    assert ended.stderr.startswith(f"tracking: error: cannot end run {'0' * 32}")


def test_joined_run_stays_running_and_own_run_finishes(tracking_env) -> None:
    cfg = TrackingConfig(experiment="test-tracking-join", system_metrics=False)
    own = open_run(cfg, run_name="alone")
    own.log_metrics({"loss": 1.0, "accuracy": 0.5}, step=1)
    own.log_metrics({"loss": 0.5, "accuracy": 0.7}, step=2)
    own.finish(succeeded=True)
    client = mlflow.MlflowClient(tracking_env.uri)
    assert client.get_run(own.run_id).info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(own.run_id, "loss")] == [1.0, 0.5]

    joined = open_run(cfg, run_id=own.run_id)
    joined.log_metrics({"loss": 0.25}, step=3)
    joined.finish(succeeded=False)  # a step's failure does not end the pipeline's run
    assert client.get_run(own.run_id).info.status == "RUNNING"
    assert len(client.get_metric_history(own.run_id, "loss")) == 3


@pytest.mark.parametrize("where", ["environment", "process"])
def test_a_step_joins_the_pipelines_run_whatever_experiment_is_active(
    tracking_env, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """MLflow refuses to resume a run outside the active experiment: a user's exported
    MLFLOW_EXPERIMENT_NAME, or an earlier set_experiment in the process, must not stop a
    step from joining the pipeline's run."""
    cfg = TrackingConfig(experiment="test-tracking-pipeline", system_metrics=False)
    pipeline = open_run(cfg, run_name="pipeline")
    pipeline.finish(succeeded=True)
    if where == "environment":
        monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "somebody-elses-experiment")
    else:
        mlflow.set_experiment("somebody-elses-experiment")
    joined = open_run(cfg, run_id=pipeline.run_id)
    joined.log_metrics({"serving/accuracy": 1.0}, step=0)
    joined.finish(succeeded=True)
    client = mlflow.MlflowClient(tracking_env.uri)
    assert client.get_run(pipeline.run_id).data.metrics["serving/accuracy"] == 1.0


def test_joining_an_unknown_run_is_a_tracking_error(tracking_env) -> None:
    with pytest.raises(TrackingError, match=f"cannot open run {'f' * 32}"):
        open_run(TrackingConfig(system_metrics=False), run_id="f" * 32)


@pytest.mark.parametrize("timeout_s", [0.5, 2.0])
def test_unreachable_server_fails_within_the_timeout(timeout_s: float) -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    tic = time.monotonic()
    with pytest.raises(TrackingError, match=rf"{uri} unreachable for {timeout_s:g} s"):
        wait_until_reachable(uri, timeout_s)
    assert timeout_s <= time.monotonic() - tic < timeout_s + 3


@pytest.mark.parametrize(
    ("uri", "ui_url", "expected"),
    [
        ("sqlite:////runs/mlflow.db", None, "http://127.0.0.1:5000/#/experiments/1/runs/abc"),
        ("file:///runs/mlruns", None, "http://127.0.0.1:5000/#/experiments/1/runs/abc"),
        ("http://mlflow:5000/", None, "http://mlflow:5000/#/experiments/1/runs/abc"),
        ("http://mlflow:5000", "https://ui.example", "https://ui.example/#/experiments/1/runs/abc"),
    ],
    ids=["sqlite: where mlflow ui serves", "file store", "server", "ui_url"],
)
def test_run_url_is_a_page_a_browser_opens(monkeypatch, uri, ui_url, expected) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = TrackingConfig(uri=uri, ui_url=ui_url)
    assert run_url(cfg, "1", "abc") == expected
