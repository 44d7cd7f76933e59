"""Train a CIFAR-10 classifier with DistributedDataParallel: the step a PyTorchJob runs.

    torchrun [torchrun args] -m steps.train --dataset DATASET_URI --output MODEL_URI
        [--config FILE] [--set train.field=value ...] [--mlflow-run-id ID]
        [--outputs-dir DIR] [--debug] [--hooks MODULE:NAME [--hook-arg KEY=VALUE ...]]

Also runs as ``python -m steps.train ...`` (one process). parse args -> join the process
group -> open the MLflow run (rank 0) -> fit (``steps.train.fit``: data, network, schedule,
loop, outputs) -> output parameters. Every rank loads the staged arrays once and takes its
share of each global batch; rank 0 alone writes checkpoints and outputs and logs to
MLflow. A restarted job resumes from the newest intact checkpoint under
``MODEL_URI/checkpoints/``, so it loses at most one epoch.

Writes ``MODEL_URI/weights.pt`` (state dict) and then ``MODEL_URI/model.json``; output
parameters ``model_uri``, ``test_accuracy`` and ``summary.json`` in the outputs dir.

``--hooks`` is for tests: ``NAME(**{KEY: VALUE})`` from ``MODULE`` gives the trainer's hooks
(``steps.train.fit.Hooks``), e.g. one that stops after an epoch's checkpoint (exit 3).
An argument, not an environment variable: it reaches every rank as torchrun passes the
command line, and nothing in a production run reads it unless asked.
"""

from __future__ import annotations

import argparse
import importlib
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
from steps.train.fit import Hooks, StopRequested, TrainResult, fit

STOPPED_EXIT = 3  # a test's hook stopped training after a checkpoint (StopRequested)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrun -m steps.train", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dataset", required=True, help="staged dataset URI (steps.stage_data)")
    parser.add_argument("--output", required=True, help="model URI: path, file:// or s3://")
    add_common(parser)
    parser.add_argument(
        "--hooks", metavar="MODULE:NAME", help="tests only: the trainer's hooks, NAME(**hook args)"
    )
    parser.add_argument(
        "--hook-arg", dest="hook_args", action="append", default=[], metavar="KEY=VALUE",
        help="tests only: a keyword argument (a string) for --hooks",
    )  # fmt: skip
    return parser


def load_hooks(spec: str | None, pairs: list[str]) -> Hooks:
    """The hooks ``--hooks MODULE:NAME`` names, made with the ``--hook-arg`` pairs; the
    hooks that do nothing without it."""
    if spec is None:
        if pairs:
            raise ConfigError(f"--hook-arg {pairs[0]} without --hooks")
        return Hooks()
    module, _, name = spec.partition(":")
    bad = [pair for pair in pairs if "=" not in pair]
    if bad:
        raise ConfigError(f"--hook-arg {bad[0]}: expected KEY=VALUE")
    try:
        factory = getattr(importlib.import_module(module), name)
        hooks = factory(**dict(pair.split("=", 1) for pair in pairs))
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(f"--hooks {spec}: {exc}") from None
    if not isinstance(hooks, Hooks):
        raise ConfigError(f"--hooks {spec}: made a {type(hooks).__name__}, not Hooks")
    return hooks


def run(args: argparse.Namespace, hooks: Hooks | None = None) -> TrainResult:
    """The step; ``hooks`` (tests, in process) in place of those ``--hooks`` names."""
    started = time.perf_counter()
    hooks = hooks or load_hooks(args.hooks, args.hook_args)
    cfg = load_config(args.config, args.overrides)
    d = setup_distributed()
    try:
        result = _train(args, cfg, d, hooks)
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


def _train(args: argparse.Namespace, cfg: PipelineConfig, d: Dist, hooks: Hooks) -> TrainResult:
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
        result = fit(args, cfg, d, tracked, hooks)
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
