"""Train a CIFAR-10 classifier with DistributedDataParallel: the step a PyTorchJob runs.

    torchrun [torchrun args] -m steps.train --dataset DATASET_URI --output MODEL_URI
        [--config FILE] [--set train.field=value ...] [--mlflow-run-id ID]
        [--outputs-dir DIR] [--debug]

Also runs as ``python -m steps.train ...`` (one process). Reads top to bottom: data,
network, schedule, loop (train, evaluate, checkpoint), outputs. Every rank loads the
staged arrays once and takes its share of each global batch; rank 0 alone writes
checkpoints and outputs and logs to MLflow. A restarted job resumes from the newest
intact checkpoint under ``MODEL_URI/checkpoints/``, so it loses at most one epoch.

Writes ``MODEL_URI/weights.pt`` (state dict) and then ``MODEL_URI/model.json``; output
parameters ``model_uri``, ``test_accuracy`` and ``summary.json`` in the outputs dir.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from mlflow.exceptions import MlflowException
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from steps.common.config import ConfigError, PipelineConfig, load_config
from steps.common.models import build_model
from steps.common.step_cli import startup_seconds
from steps.common.storage import LocalStore, StorageError, open_store
from steps.common.tracking import TrackedRun, TrackingError, open_run
from steps.train.data import Batches, TrainDataError, load_dataset
from steps.train.loop import (
    epoch_metrics,
    evaluate,
    one_cycle,
    rates,
    train_one_epoch,
    use_bf16_autocast,
)
from steps.train.report import log_final, log_start
from steps.train.state import (
    CheckpointMismatch,
    Dist,
    all_reduce_sum,
    average_buffers,
    barrier,
    broadcast_object,
    model_meta,
    resume,
    rng_state,
    save_checkpoint,
    setup_distributed,
    state_checksum,
    teardown_distributed,
    write_model,
)

# --- fixed settings (the tunables are cfg.train fields, see steps/common/config/) -----------
OUTPUTS_ENV = "CIFAR_OUTPUTS_DIR"
STOP_AFTER_ENV = "CIFAR_TRAIN_STOP_AFTER_EPOCH"  # tests: exit 3 once epoch k is checkpointed
DEBUG_DIR_ENV = "CIFAR_TRAIN_DEBUG_DIR"  # tests: each rank writes rank-N.json (weights sha256)
STOPPED_EXIT = 3


class StopRequested(Exception):
    """The test-only stop flag fired after a checkpoint."""


@dataclass
class TrainResult:
    model_uri: str
    test_accuracy: float
    epochs: int  # epochs the final weights were trained for
    start_epoch: int  # epochs already done by a checkpoint at start (0: fresh)
    world_size: int
    device: str
    train_seconds: float  # training loops only, over all attempts
    time_to_target_s: float | None
    images_per_s: float | None  # mean over the epochs this attempt ran
    seconds: float = 0.0  # this step's busy time, start to finish
    startup_seconds: float | None = None  # torchrun's start to this rank's code
    mlflow_run_id: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)


# --- the step ----------------------------------------------------------------------------
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
    if d.is_main and args.outputs_dir:
        outputs = LocalStore(Path(args.outputs_dir))
        outputs.write_bytes("model_uri", result.model_uri.encode())
        outputs.write_bytes("test_accuracy", f"{result.test_accuracy:.6f}".encode())
        outputs.write_bytes("summary.json", json.dumps(asdict(result), indent=2).encode())
    if d.is_main:
        print(
            f"test accuracy {result.test_accuracy:.4f} after {result.epochs} epochs on "
            f"{d.world_size} x {d.device.type}; step {result.seconds:.1f} s",
            file=sys.stderr,
        )
        print(result.model_uri, flush=True)
    return result


def _train(args, cfg: PipelineConfig, d: Dist) -> TrainResult:
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
        result = _fit(args, cfg, d, tracked)
    except BaseException:
        if tracked:
            tracked.finish(succeeded=False)
        raise
    if tracked:
        tracked.finish(succeeded=True)
    return result


def _fit(args, cfg: PipelineConfig, d: Dist, tracked: TrackedRun | None) -> TrainResult:
    hp = cfg.train
    say = functools.partial(print, file=sys.stderr, flush=True) if d.is_main else _quiet
    on_gpu = d.device.type == "cuda"
    channels_last = hp.channels_last  # oneDNN on CPU gains from it too (~20%)
    bf16 = functools.partial(torch.autocast, d.device.type, dtype=torch.bfloat16)
    use_bf16 = use_bf16_autocast(hp, d.device)
    autocast = bf16 if use_bf16 else contextlib.nullcontext

    # Data: the staged arrays, once, on this rank's device.
    data = load_dataset(args.dataset, cfg.storage, d.device)
    if len(data.train_labels) < hp.batch_size:
        raise ConfigError(
            f"train.batch_size={hp.batch_size} exceeds the {len(data.train_labels)} "
            f"training images of {args.dataset}"
        )
    shard = {"rank": d.rank, "world_size": d.world_size, "channels_last": channels_last}
    train_batches = Batches(
        data.train_images, data.train_labels, global_batch=hp.batch_size, seed=hp.seed,
        crop_padding=hp.crop_padding, **shard,
    )  # fmt: skip
    test_batches = Batches(data.test_images, data.test_labels, global_batch=hp.batch_size, **shard)
    num_classes = len(data.classes)

    # Network, optimizer, schedule.
    torch.manual_seed(hp.seed)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    raw = build_model(hp.model, num_classes, hp.width).to(d.device, memory_format=memory_format)
    optimizer = torch.optim.SGD(
        raw.parameters(), lr=hp.lr, momentum=hp.momentum, nesterov=hp.momentum > 0,
        weight_decay=hp.weight_decay,
    )  # fmt: skip
    steps_per_epoch = train_batches.steps_per_epoch
    total_steps = hp.epochs * steps_per_epoch
    warmup_steps = min(round(hp.warmup_epochs * steps_per_epoch), total_steps - 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, one_cycle(total_steps, warmup_steps))
    criterion = nn.CrossEntropyLoss(label_smoothing=hp.label_smoothing)

    # Resume from the newest intact checkpoint of this output, if there is one.
    store = open_store(args.output, cfg.storage)
    identity = {"architecture": hp.model, "width": hp.width, "dataset_digest": data.digest}
    modules = {"model": raw, "optimizer": optimizer, "scheduler": scheduler}
    restored = resume(store, d, identity, modules, say)
    progress = {"epoch": 0, "train_seconds": 0.0, "time_to_target_s": None}
    history: list[dict[str, float]] = []
    if restored:
        progress, history = restored["progress"], restored["history"]
        say(f"resumed after epoch {progress['epoch']} of {hp.epochs}")
    start_epoch = progress["epoch"]

    model: nn.Module = raw
    if d.distributed:
        model = DistributedDataParallel(raw, device_ids=[d.device.index] if on_gpu else None)
    if hp.compile:
        model = torch.compile(model)
    if tracked:
        log_start(tracked, cfg, data, store.root)
    say(
        f"training {hp.model} on {len(data.train_labels):,} images: {d.world_size} rank(s) on "
        f"{d.device.type}, {steps_per_epoch} steps of {hp.batch_size} per epoch"
        f"{', bf16 autocast' if use_bf16 else ''}"
    )

    # Loop: train, evaluate, checkpoint; stop at the epoch count or the target accuracy.
    stop_after = int(os.environ.get(STOP_AFTER_ENV) or 0)
    end_epoch = start_epoch if progress["time_to_target_s"] is not None else hp.epochs
    totals, speeds = None, []
    for epoch in range(start_epoch, end_epoch):
        tic = time.perf_counter()
        train_totals = train_one_epoch(
            model, train_batches, epoch, optimizer, scheduler, criterion, autocast
        )
        if on_gpu:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - tic
        average_buffers(raw, d)  # BatchNorm statistics: the mean over ranks
        test_totals = evaluate(raw, test_batches, num_classes, autocast)
        totals = all_reduce_sum(torch.cat([train_totals, test_totals]), d)
        lr = optimizer.param_groups[0]["lr"]
        metrics = epoch_metrics(totals, lr, seconds, steps_per_epoch * hp.batch_size)
        speeds.append(metrics["images_per_s"])
        history.append({"epoch": epoch + 1, **metrics})
        test_acc = metrics["test_accuracy"]
        reached = hp.target_accuracy is not None and test_acc >= hp.target_accuracy
        progress["train_seconds"] += seconds
        if reached:
            progress["time_to_target_s"] = progress["train_seconds"]
        progress["epoch"] = epoch + 1
        last = reached or epoch + 1 == hp.epochs
        say(
            f"epoch {epoch + 1}/{hp.epochs}  train loss {metrics['train_loss']:.4f} acc "
            f"{metrics['train_accuracy']:.4f}  test loss {metrics['test_loss']:.4f} acc "
            f"{test_acc:.4f}  {speeds[-1]:,.0f} img/s  {seconds:.2f} s"
        )
        if tracked:
            tracked.log_metrics(metrics, step=epoch + 1)
        if d.is_main and ((epoch + 1) % hp.checkpoint_every == 0 or last):
            state = {"epoch": epoch + 1, "identity": identity, "rng": rng_state()}
            state |= {name: module.state_dict() for name, module in modules.items()}
            state |= {"progress": progress, "history": history}
            say(f"checkpoint {save_checkpoint(store, epoch + 1, state, hp.keep_checkpoints)}")
        if stop_after == epoch + 1 and not last:
            barrier(d)  # the other ranks wait for rank 0's checkpoint before exiting
            raise StopRequested(f"stopped after epoch {epoch + 1} ({STOP_AFTER_ENV})")
        if reached:
            say(
                f"reached test accuracy {test_acc:.4f} >= {hp.target_accuracy} after "
                f"{progress['time_to_target_s']:.1f} s of training"
            )
            break
    if totals is None:  # resumed after the last epoch: evaluate the restored weights
        test_totals = evaluate(raw, test_batches, num_classes, autocast)
        totals = all_reduce_sum(torch.cat([test_totals.new_zeros(3), test_totals]), d)
    test_acc = rates(totals[3:6])[1]

    # Outputs: weights, then model.json (which publishes them), then MLflow.
    meta = model_meta(hp, data, args.dataset, test_acc, progress["epoch"])
    if d.is_main:
        write_model(store, raw, meta)
    if os.environ.get(DEBUG_DIR_ENV):  # tests compare the ranks' weights
        debug = {"rank": d.rank, "weights_sha256": state_checksum(raw), "start_epoch": start_epoch}
        LocalStore(Path(os.environ[DEBUG_DIR_ENV])).write_bytes(
            f"rank-{d.rank}.json", json.dumps(debug).encode()
        )
    if tracked:
        confusion = totals[6:].view(num_classes, num_classes).long().cpu().numpy()
        example = next(test_batches.ordered(2))[0]
        say(f"MLflow model {log_final(tracked, raw, example, history, confusion, meta, progress)}")
    return TrainResult(
        model_uri=store.root,
        test_accuracy=test_acc,
        epochs=progress["epoch"],
        start_epoch=start_epoch,
        world_size=d.world_size,
        device=str(d.device),
        train_seconds=progress["train_seconds"],
        time_to_target_s=progress["time_to_target_s"],
        images_per_s=sum(speeds) / len(speeds) if speeds else None,
        mlflow_run_id=tracked.run_id if tracked else None,
        history=history,
    )


def _quiet(*_args, **_kwargs) -> None:
    """``say`` on ranks other than 0."""


# --- command line ------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrun -m steps.train", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dataset", required=True, help="staged dataset URI (steps.stage_data)")
    parser.add_argument("--output", required=True, help="model URI: path, file:// or s3://")
    parser.add_argument("--config", help="pipeline config YAML (default: configs/local.yaml)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE"
    )
    parser.add_argument(
        "--mlflow-run-id",
        default=os.environ.get("MLFLOW_RUN_ID") or None,
        help="join this MLflow run (the pipeline's); default: $MLFLOW_RUN_ID, else start one",
    )
    parser.add_argument(
        "--outputs-dir",
        type=Path,
        default=os.environ.get(OUTPUTS_ENV),
        help=f"write output parameters here (default: ${OUTPUTS_ENV}, else none)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


USER_ERRORS = (ConfigError, CheckpointMismatch)
RUNTIME_ERRORS = (TrainDataError, StorageError, TrackingError, MlflowException, RuntimeError)


def _exit_code(args: argparse.Namespace) -> int:
    """Run; a failure is one line on stderr and exit 2 (user error), 1, or 3 (test stop)."""
    try:
        run(args)
        return 0
    except (*USER_ERRORS, StopRequested, *RUNTIME_ERRORS) as exc:
        if args.debug:
            raise
        code = 2 if isinstance(exc, USER_ERRORS) else 1
        code = STOPPED_EXIT if isinstance(exc, StopRequested) else code
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        rank = os.environ.get("RANK", "0")
        prefix = "train" if rank == "0" else f"train[rank {rank}]"
        print(f"{prefix}: error: {lines[0]}", file=sys.stderr, flush=True)
        return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _exit_code(args)
