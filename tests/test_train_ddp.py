"""Two ranks under real ``torchrun`` (gloo, on the CPU), tracked in a real ``mlflow server``
on 127.0.0.1 as the workflow runs them (``steps.tracking start`` makes the run, the
trainer joins it): far above chance, identical weights on both ranks, outputs as the
contract says, the MLflow run's params, metrics, input, plots and model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pytest
import torch

from flows.local.servers.mlflow_server import MLflowServer
from steps.common.config import flatten, load_config
from steps.common.models import build_model
from steps.common.storage import open_store
from steps.train.checkpoints import checkpoint_epochs
from tests.helpers.paths import REPO_ROOT
from tests.helpers.train_hooks import hook_args, state_checksum
from tests.helpers.train_runs import (
    TINY_RESNET,
    launch,
)

# in-process runs on one thread (conftest.py one_torch_thread)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- two ranks under torchrun, tracked in a real MLflow server ---------------------------
@dataclass
class DDPRun:
    process: subprocess.CompletedProcess
    model_dir: Path
    outputs: Path
    debug: Path
    run_id: str
    server: MLflowServer

    def summary(self) -> dict:
        return json.loads((self.outputs / "summary.json").read_text())


@pytest.fixture(scope="module")
def ddp_run(
    dataset_uri: str, mlflow_server: MLflowServer, tmp_path_factory: pytest.TempPathFactory
) -> DDPRun:
    """The workflow's shape: ``steps.tracking start`` makes the run, the trainer joins it."""
    tmp = tmp_path_factory.mktemp("ddp")
    env = {"MLFLOW_TRACKING_URI": mlflow_server.uri}
    start = ["start", "--run-name", "ddp-test", "--set", "tracking.experiment=test-train"]
    started = subprocess.run(
        [sys.executable, "-m", "steps.tracking", *start, "--outputs-dir", str(tmp / "start")],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    assert (tmp / "start" / "run_id").read_text() == run_id
    process = launch(
        2,
        dataset_uri,
        tmp / "model",
        TINY_RESNET,
        "--mlflow-run-id",
        run_id,
        "--outputs-dir",
        str(tmp / "outputs"),
        *hook_args(debug_dir=tmp / "debug"),
        env=env,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    return DDPRun(process, tmp / "model", tmp / "outputs", tmp / "debug", run_id, mlflow_server)


def test_two_ranks_learn_far_above_chance(ddp_run: DDPRun) -> None:
    summary = ddp_run.summary()
    losses = [h["train_loss"] for h in summary["history"]]
    assert summary["world_size"] == 2
    assert [h["epoch"] for h in summary["history"]] == [1, 2, 3]
    assert losses[-1] < losses[0] * 0.8, losses
    assert summary["test_accuracy"] >= 0.9  # chance is 0.1


def test_two_ranks_end_with_identical_weights(ddp_run: DDPRun) -> None:
    ranks = [json.loads((ddp_run.debug / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    # ... and weights.pt is exactly what the ranks hold (BatchNorm buffers included).
    meta = json.loads((ddp_run.model_dir / "model.json").read_text())
    model = build_model(meta["architecture"], meta["num_classes"], meta["width"])
    model.load_state_dict(torch.load(ddp_run.model_dir / "weights.pt", weights_only=True))
    assert state_checksum(model) == ranks[0]["weights_sha256"]


def test_model_outputs_follow_the_contract(ddp_run: DDPRun, dataset_uri: str) -> None:
    meta = json.loads((ddp_run.model_dir / "model.json").read_text())
    summary = ddp_run.summary()
    assert meta["architecture"] == "resnet9" and meta["width"] == 8
    assert meta["num_classes"] == 10 and len(meta["classes"]) == 10
    assert meta["input_shape"] == [3, 32, 32]
    assert len(meta["mean"]) == len(meta["std"]) == 3
    assert meta["dataset_uri"] == dataset_uri
    assert dataset_uri.endswith(meta["dataset_digest"])
    assert meta["epochs"] == 3
    assert meta["test_accuracy"] == pytest.approx(summary["test_accuracy"])
    model_uri = (ddp_run.outputs / "model_uri").read_text()
    assert model_uri == ddp_run.model_dir.as_uri() == ddp_run.process.stdout.strip()
    assert float((ddp_run.outputs / "test_accuracy").read_text()) == pytest.approx(
        meta["test_accuracy"], abs=1e-6
    )
    assert summary["seconds"] > summary["train_seconds"] > 0
    assert checkpoint_epochs(open_store(model_uri)) == [3, 2]  # keep_checkpoints=2


def test_mlflow_run_has_params_metrics_input_plots_and_model(
    ddp_run: DDPRun, dataset_uri: str
) -> None:
    client = mlflow.MlflowClient(tracking_uri=ddp_run.server.uri)
    run = client.get_run(ddp_run.run_id)
    assert run.info.status == "RUNNING"  # joined: the workflow's exit handler ends it
    cfg = load_config(None, TINY_RESNET)
    assert run.data.params == {key: value for key, value in flatten(cfg).items()}
    history = client.get_metric_history(ddp_run.run_id, "test_accuracy")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == [1, 2, 3]
    for key in ("train_loss", "train_accuracy", "test_loss", "lr", "images_per_s"):
        assert len(client.get_metric_history(ddp_run.run_id, key)) == 3, key
    (dataset_input,) = run.inputs.dataset_inputs
    digest = dataset_uri.rsplit("/", 1)[1]
    assert dataset_input.dataset.digest == digest[:32]
    assert dataset_input.dataset.source and digest in dataset_input.dataset.source
    assert {t.key: t.value for t in dataset_input.tags}["sha256"] == digest
    artifacts = {a.path for a in client.list_artifacts(ddp_run.run_id, "plots")}
    assert artifacts == {"plots/curves.png", "plots/confusion_matrix.png"}

    mlflow.set_tracking_uri(ddp_run.server.uri)
    loaded = mlflow.pytorch.load_model(run.data.tags["train.logged_model_uri"])
    meta = json.loads((ddp_run.model_dir / "model.json").read_text())
    model = build_model(meta["architecture"], meta["num_classes"], meta["width"]).eval()
    model.load_state_dict(torch.load(ddp_run.model_dir / "weights.pt", weights_only=True))
    images = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), model(images), rtol=1e-4, atol=1e-4)
