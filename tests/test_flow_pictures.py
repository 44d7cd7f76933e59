"""The run's pictures become output artifacts of the exit handler, which the Argo UI shows:
close-run copies them from the MLflow run (a real ``mlflow server``) into its outputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from flows.cifar import build_template
from flows.pipeline.mlflow_templates import PICTURES
from steps import tracking
from steps.common.config import load_config
from tests.helpers.flow_helpers import CONFIGS, templates
from tests.helpers.paths import REPO_ROOT


def test_the_flow_names_the_pictures_close_run_copies() -> None:
    assert set(PICTURES) == set(tracking.PICTURES)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_close_run_declares_the_pictures_as_optional_artifacts(path: Path) -> None:
    close = templates(build_template(load_config(path)).to_dict())["close-run"]
    artifacts = {a["name"]: a for a in close["outputs"]["artifacts"]}
    assert {a["path"] for a in artifacts.values()} == {f"/tmp/outputs/{p}" for p in PICTURES}
    assert all(a["optional"] and a["archive"] == {"none": {}} for a in artifacts.values())
    args = close["container"]["args"]
    assert args[args.index("--outputs-dir") + 1] == "/tmp/outputs"


def test_close_run_copies_the_pictures_that_were_logged(mlflow_server, tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_server.uri}
    mlflow.set_tracking_uri(mlflow_server.uri)
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name("pictures") or client.create_experiment("pictures")
    experiment_id = experiment if isinstance(experiment, str) else experiment.experiment_id
    run = client.create_run(experiment_id)
    picture = tmp_path / "curves.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n-curves")
    client.log_artifact(run.info.run_id, str(picture), artifact_path="plots")
    out = tmp_path / "outputs"
    argv = ["end", "--run-id", run.info.run_id, "--status", "Failed", "--outputs-dir", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "steps.tracking", *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "curves.png").read_bytes() == picture.read_bytes()
    assert not (out / "benchmark.png").exists()  # the failed run never benchmarked
    assert "pictures: curves.png" in done.stderr
    assert client.get_run(run.info.run_id).info.status == "FAILED"
