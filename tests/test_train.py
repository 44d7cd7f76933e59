"""The training step end to end: real ``torchrun`` (gloo, two ranks on the CPU), a real
``mlflow server`` on 127.0.0.1, checkpoints and resume on a directory and on SeaweedFS S3.

The synthetic dataset is small but learnable (a hue and a stripe orientation per class),
so a few epochs of a small net reach far above chance (0.1) in seconds.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from flows.local.servers.seaweedfs import free_port
from steps.common.config import load_config
from steps.common.models import build_model
from steps.common.storage import open_store
from steps.stage_data.stage import parse_source, stage_dataset
from steps.train.checkpoints import checkpoint_epochs, checkpoint_key
from steps.train.fit import StopRequested
from steps.train.step import main
from tests.helpers.buckets import S3Bucket
from tests.helpers.train_hooks import TestHooks, hook_args
from tests.helpers.train_runs import (
    SIMPLE,
    TINY_RESNET,
    error_lines,
    launch,
    sets,
    train_in_process,
)

# in-process runs on one thread (conftest.py one_torch_thread)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- resume -------------------------------------------------------------------------------
@pytest.mark.slow
def test_stopped_two_rank_job_resumes_at_the_next_epoch(dataset_uri: str, tmp_path: Path):
    debug = hook_args(debug_dir=tmp_path / "debug")
    stopped = launch(
        2, dataset_uri, tmp_path / "model", SIMPLE, *debug, "--hook-arg", "stop_after=1"
    )
    assert stopped.returncode != 0
    assert "stopped after epoch 1" in stopped.stderr
    store = open_store(str(tmp_path / "model"))
    assert checkpoint_epochs(store) == [1] and not store.exists("model.json")

    resumed = launch(2, dataset_uri, tmp_path / "model", SIMPLE, "--outputs-dir",
                     str(tmp_path / "out"), *debug)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "resumed after epoch 1 of 3" in resumed.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["start_epoch"], summary["epochs"]) == (1, 3)
    assert [h["epoch"] for h in summary["history"]] == [1, 2, 3]  # epoch 1 from the checkpoint
    ranks = [json.loads((tmp_path / "debug" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["start_epoch"] for r in ranks] == [1, 1]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]


def test_resumed_run_ends_with_the_uninterrupted_runs_weights(
    dataset_uri: str, tmp_path: Path
) -> None:
    whole = train_in_process(dataset_uri, tmp_path / "whole", SIMPLE)
    with pytest.raises(StopRequested, match="stopped after epoch 2"):
        train_in_process(dataset_uri, tmp_path / "parts", SIMPLE, TestHooks(stop_after=2))
    resumed = train_in_process(dataset_uri, tmp_path / "parts", SIMPLE)
    assert (resumed.start_epoch, resumed.epochs) == (2, 3)
    # Data order and augmentation are functions of (seed, epoch, rank); the optimizer,
    # schedule and RNG come back from the checkpoint: the weights match bit for bit.
    weights = [
        torch.load(tmp_path / d / "weights.pt", weights_only=True) for d in ("whole", "parts")
    ]
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name
    assert resumed.test_accuracy == whole.test_accuracy


def test_the_stop_hook_handed_in_on_the_command_line_exits_3_after_the_checkpoint(
    dataset_uri: str, tmp_path: Path, capsys
) -> None:
    """The test-only stop (README's exit 3): handed in by --hooks, as under torchrun."""
    argv = ["--dataset", dataset_uri, "--output", str(tmp_path / "model"), *sets(SIMPLE)]
    assert main([*argv, *hook_args(stop_after=1)]) == 3
    (line,) = error_lines(capsys.readouterr().err)
    assert line == "train: error: stopped after epoch 1 (the test's stop hook)"
    store = open_store(str(tmp_path / "model"))
    assert checkpoint_epochs(store) == [1] and not store.exists("model.json")


@pytest.fixture(scope="module")
def finished_checkpoints(dataset_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = tmp_path_factory.mktemp("finished") / "model"
    train_in_process(dataset_uri, model, SIMPLE)
    return model


def _flip_a_byte(model: Path) -> None:
    path = model / checkpoint_key(3)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(model: Path) -> None:
    path = model / checkpoint_key(3)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage_with_matching_sidecar(model: Path) -> None:
    garbage = b"not a torch checkpoint" * 100
    (model / checkpoint_key(3)).write_bytes(garbage)
    sidecar = json.loads((model / checkpoint_key(3, "json")).read_text())
    sidecar["sha256"] = hashlib.sha256(garbage).hexdigest()
    (model / checkpoint_key(3, "json")).write_text(json.dumps(sidecar))


def _code_with_matching_sidecar(model: Path) -> None:  # unpickling it would run a command
    class RunsCode:
        def __reduce__(self):
            return (os.system, (f"touch {model / 'code-ran'}",))

    buffer = io.BytesIO()
    torch.save({"epoch": 3, "model": RunsCode()}, buffer)
    (model / checkpoint_key(3)).write_bytes(buffer.getvalue())
    sidecar = json.loads((model / checkpoint_key(3, "json")).read_text())
    sidecar["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    (model / checkpoint_key(3, "json")).write_text(json.dumps(sidecar))


def _drop_sidecar(model: Path) -> None:  # as if the job died between the two writes
    (model / checkpoint_key(3, "json")).unlink()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(_flip_a_byte, "sha256 differs from the sidecar", id="flipped-byte"),
        pytest.param(_truncate, "sha256 differs from the sidecar", id="truncated"),
        pytest.param(_garbage_with_matching_sidecar, "does not load", id="unloadable"),
        pytest.param(
            _code_with_matching_sidecar,
            "does not load: refers to posix.system, which is code, not tensors: refused",
            id="malicious",
        ),
        pytest.param(_drop_sidecar, None, id="unpublished"),
    ],
)
def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(
    finished_checkpoints: Path, dataset_uri: str, tmp_path: Path, capsys, damage, message
) -> None:
    model = tmp_path / "model"
    shutil.copytree(finished_checkpoints, model)
    (model / "model.json").unlink()
    damage(model)
    result = train_in_process(dataset_uri, model, SIMPLE)
    stderr = capsys.readouterr().err
    assert (result.start_epoch, result.epochs) == (2, 3)
    assert "resumed after epoch 2 of 3" in stderr
    assert "weights_only" not in stderr  # never the advice to load a file unsafely
    assert not (model / "code-ran").exists()
    if message:
        assert f"epoch-0003.pt is unusable ({message}" in stderr
        assert "falling back to the previous one" in stderr
    else:
        assert "unusable" not in stderr
    assert json.loads((model / "model.json").read_text())["epochs"] == 3


def test_dataset_and_checkpoints_on_s3(s3_bucket: S3Bucket) -> None:
    quiet = Console(file=io.StringIO())
    staged = stage_dataset(parse_source("synthetic:600"), s3_bucket.uri, load_config(), quiet)
    model_uri = f"{s3_bucket.uri}/models/run-1"
    with pytest.raises(StopRequested):
        train_in_process(
            staged.dataset_uri, model_uri, [*SIMPLE, "train.epochs=2"], TestHooks(stop_after=1)
        )
    result = train_in_process(staged.dataset_uri, model_uri, [*SIMPLE, "train.epochs=2"])
    store = open_store(model_uri)
    assert (result.model_uri, result.start_epoch, result.epochs) == (model_uri, 1, 2)
    assert checkpoint_epochs(store) == [2, 1]
    assert json.loads(store.read_bytes("model.json"))["epochs"] == 2
    state = torch.load(io.BytesIO(store.read_bytes("weights.pt")), weights_only=True)
    assert set(state) == set(build_model("simplecnn").state_dict())


# --- failures: one line, the right exit code ----------------------------------------------
@pytest.mark.parametrize(
    ("case", "extra", "code", "pattern"),
    [
        ("bad value", ["--set", "train.epochs=0"], 2, r"train\.epochs"),
        ("unknown field", ["--set", "train.epoch=3"], 2, r"train\.epoch"),
        ("batch too big", ["--set", "train.batch_size=4096"], 2, r"exceeds the 1500 training"),
        ("not a dataset", ["--dataset", "{tmp}"], 2, r"no manifest\.json"),
        ("other model's checkpoints", ["--set", "train.model=resnet9"], 2, r"was trained with"),
    ],
)
def test_failures_are_one_line_with_the_right_exit_code(
    finished_checkpoints: Path, dataset_uri: str, tmp_path: Path, capsys, case, extra, code, pattern
) -> None:
    output = tmp_path / "model"
    shutil.copytree(finished_checkpoints, output)
    argv = ["--dataset", dataset_uri, "--output", str(output), *sets(SIMPLE)]
    argv += [arg.replace("{tmp}", str(tmp_path)) for arg in extra]
    assert main(argv) == code
    stderr = capsys.readouterr().err
    (line,) = error_lines(stderr)
    assert line.startswith("train: error: ") and "Traceback" not in stderr
    assert re.search(pattern, line), line


@pytest.mark.parametrize(
    ("nproc", "how"),
    [(0, "config"), pytest.param(2, "environment", marks=pytest.mark.slow)],
    ids=["python-config-uri", "torchrun-env-uri"],
)
def test_unreachable_tracking_server_fails_fast_before_training(
    dataset_uri: str, tmp_path: Path, nproc: int, how: str
) -> None:
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    overrides = [o for o in TINY_RESNET] + ["tracking.startup_timeout_s=3"]
    env = {"MLFLOW_TRACKING_URI": uri} if how == "environment" else {}
    if how == "config":
        overrides.append(f"tracking.uri={uri}")
        env["MLFLOW_TRACKING_URI"] = ""
    tic = time.monotonic()
    process = launch(nproc, dataset_uri, tmp_path / "model", overrides, env=env)
    assert time.monotonic() - tic < 30
    assert process.returncode == 1
    lines = error_lines(process.stderr)
    main_lines = [line for line in lines if line.startswith("train: error:")]
    other_lines = [line for line in lines if not line.startswith("train: error:")]
    assert len(main_lines) == 1, process.stderr
    assert re.search(rf"{uri} unreachable for 3 s", main_lines[0]), process.stderr
    expected = ["train[rank 1]: error: rank 0 could not open the MLflow run"] if nproc else []
    assert other_lines == expected
    # No traceback from our ranks; torchrun itself reports its failed children with one.
    tracebacks = re.findall(
        r'Traceback \(most recent call last\):\n\s+File "([^"]+)"', process.stderr
    )
    assert all(path.endswith("bin/torchrun") for path in tracebacks), tracebacks
    assert not (tmp_path / "model").exists()  # failed before any work


def test_target_accuracy_stops_early_and_records_the_time(dataset_uri: str, tmp_path: Path):
    overrides = [*SIMPLE, "train.epochs=8", "train.target_accuracy=0.3"]
    result = train_in_process(dataset_uri, tmp_path / "model", overrides)
    first = next(h for h in result.history if h["test_accuracy"] >= 0.3)
    assert result.epochs == first["epoch"] < 8
    assert result.time_to_target_s == pytest.approx(sum(h["epoch_seconds"] for h in result.history))
    assert json.loads((tmp_path / "model" / "model.json").read_text())["epochs"] == result.epochs
    again = train_in_process(dataset_uri, tmp_path / "model", overrides)  # a restarted pod
    assert (again.start_epoch, again.epochs) == (result.epochs, result.epochs)
    assert again.time_to_target_s == result.time_to_target_s


def test_bf16_autocast_on_cpu_still_learns(dataset_uri: str, tmp_path: Path):
    fp32 = train_in_process(dataset_uri, tmp_path / "fp32", [*SIMPLE, "train.amp_bf16_cpu=false"])
    bf16 = train_in_process(dataset_uri, tmp_path / "bf16", [*SIMPLE, "train.amp_bf16_cpu=true"])
    assert bf16.test_accuracy >= 0.4  # chance is 0.1
    assert bf16.history[-1]["train_loss"] != fp32.history[-1]["train_loss"]  # it did change
