"""Train a CIFAR-10 classifier with DistributedDataParallel: the step a PyTorchJob runs.

    torchrun [torchrun args] -m steps.train --dataset DATASET_URI --output MODEL_URI
        [--config FILE] [--set train.field=value ...] [--mlflow-run-id ID]
        [--outputs-dir DIR] [--debug]

Also runs as ``python -m steps.train ...`` (one process). parse args -> join the process
group -> open the MLflow run (rank 0) -> fit (``steps.train.fit``: data, network, schedule,
loop, outputs) -> output parameters. Every rank loads the staged arrays once and takes its
share of each global batch; rank 0 alone writes checkpoints and outputs and logs to
MLflow. A restarted job resumes from the newest intact checkpoint under
``MODEL_URI/checkpoints/``, so it loses at most one epoch.

Writes ``MODEL_URI/weights.pt`` (state dict) and then ``MODEL_URI/model.json``; output
parameters ``model_uri``, ``test_accuracy`` and ``summary.json`` in the outputs dir.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict

from steps.common.config import ConfigError, PipelineConfig, load_config
from steps.common.pipeline_run import TrackingError, open_run
from steps.common.step_cli import add_common, run_main, startup_seconds, write_outputs
from steps.train.checkpoints import CheckpointMismatch
from steps.train.distributed import (
    Dist,
    barrier,
    broadcast_object,
    setup_distributed,
    teardown_distributed,
)
from steps.train.fit import TrainResult, fit
from steps.train.hooks import StopRequested, from_environment

STOPPED_EXIT = 3  # the test-only stop after a checkpoint (steps.train.hooks.STOP_AFTER_ENV)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrun -m steps.train", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dataset", required=True, help="staged dataset URI (steps.stage_data)")
    parser.add_argument("--output", required=True, help="model URI: path, file:// or s3://")
    add_common(parser)
    return parser


def run(args: argparse.Namespace) -> TrainResult:
    started = time.perf_counter()
    cfg = load_config(args.config, args.overrides)
    d = setup_distributed()
    try:
        result = _train(args, cfg, d)
        # Leave together: a rank that tears down while rank 0 still writes the model and
        # logs to MLflow can abort in gloo, and torchrun then kills rank 0 mid-write.
        barrier(d)
    finally:
        teardown_distributed()
    result.seconds = time.perf_counter() - started
    result.startup_seconds = startup_seconds(result.seconds)
    if d.is_main:
        outputs = {"model_uri": result.model_uri, "test_accuracy": f"{result.test_accuracy:.6f}"}
        write_outputs(args.outputs_dir, {**outputs, "summary.json": asdict(result)})
        print(
            f"test accuracy {result.test_accuracy:.4f} after {result.epochs} epochs on "
            f"{d.world_size} x {d.device.type}; step {result.seconds:.1f} s",
            file=sys.stderr,
        )
        print(result.model_uri, flush=True)
    return result


def _train(args: argparse.Namespace, cfg: PipelineConfig, d: Dist) -> TrainResult:
    """Open the MLflow run at start-up (rank 0; every rank learns if that failed), fit, close."""
    if cfg.train.batch_size % d.world_size:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} is not divisible by {d.world_size} ranks"
        )
    tracked, problem = None, None
    if d.is_main and cfg.tracking.enabled:
        try:
            tracked = open_run(cfg.tracking, args.mlflow_run_id, tags={"step": "train"})
        except TrackingError as exc:
            problem = str(exc)
    problem = broadcast_object(problem, d)
    if problem:
        raise TrackingError(problem if d.is_main else "rank 0 could not open the MLflow run")
    try:
        result = fit(args, cfg, d, tracked, from_environment())
    except BaseException:
        if tracked:
            tracked.finish(succeeded=False)
        raise
    if tracked:
        tracked.finish(succeeded=True)
    return result


def main(argv: list[str] | None = None) -> int:
    rank = os.environ.get("RANK", "0")
    prog = "train" if rank == "0" else f"train[rank {rank}]"
    args = build_parser().parse_args(argv)
    return run_main(prog, run, args, (CheckpointMismatch,), {StopRequested: STOPPED_EXIT})
