"""The training itself, top to bottom: the staged data read onto the device, the network
and its schedule (``loop``), resume, the epoch loop (train, evaluate, checkpoint), outputs.
Every rank runs it; rank 0 alone says what happens, writes checkpoints and the model, and
logs to MLflow.

``Hooks`` are the points where a test acts on a run (stop after an epoch as a killed job
would, record each rank's weights): the tests hand their own to ``steps.train.step``
(``--hooks``, or ``run(args, hooks)`` in process); a run without them calls these, which do
nothing.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from steps.common.config import ConfigError, PipelineConfig, StorageConfig, TrainConfig
from steps.common.dataset import SPLITS, read_manifest, read_split
from steps.common.pipeline_run import TrackedRun
from steps.common.storage import Store, open_store
from steps.train.checkpoints import (
    Progress,
    model_meta,
    resume,
    save_checkpoint,
    training_state,
    write_model,
)
from steps.train.data import Dataset
from steps.train.distributed import Dist, average_buffers
from steps.train.loop import (
    EpochTotals,
    Training,
    build_training,
    epoch_metrics,
    evaluate,
    train_one_epoch,
    wrap_model,
)
from steps.train.report import log_final, log_start


class StopRequested(Exception):
    """A hook stopped training after an epoch's checkpoint (the step exits 3)."""


class Hooks:
    """Called by the trainer at fixed points; these do nothing (a test passes its own)."""

    def after_epoch(self, epoch: int, last: bool, d: Dist) -> None:
        """``epoch`` (counted from 1) is done and checkpointed when due; ``last``: no epoch
        follows. May raise ``StopRequested``."""

    def at_end(self, model: torch.nn.Module, start_epoch: int, d: Dist) -> None:
        """Training is over and rank 0 has written the model."""


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


@dataclass(frozen=True)
class RunContext:
    """What stays the same from epoch to epoch: settings, ranks, where checkpoints go and
    metrics are logged, how rank 0 speaks, and the test hooks."""

    hp: TrainConfig
    d: Dist
    store: Store
    identity: dict[str, Any]  # what a checkpoint must match to be resumed
    tracked: TrackedRun | None
    say: Callable[[str], None]
    hooks: Hooks


def load_dataset(uri: str, storage: StorageConfig, device: torch.device) -> Dataset:
    """A dataset staged by ``steps.stage_data``, every file verified against the manifest
    it wrote last, read onto ``device`` once."""
    store = open_store(uri, storage)
    manifest = read_manifest(store)
    tensors: dict[str, torch.Tensor] = {}
    for split in SPLITS:
        images, labels = read_split(store, manifest, split)
        tensors[f"{split}_images"] = torch.from_numpy(images).to(device)
        tensors[f"{split}_labels"] = torch.from_numpy(labels).to(device)
    return Dataset(
        uri=uri,
        name=manifest.get("name", "dataset"),
        digest=manifest["digest"],
        classes=list(manifest.get("classes", [str(i) for i in range(10)])),
        **tensors,
    )


def fit(
    args: argparse.Namespace, cfg: PipelineConfig, d: Dist, tracked: TrackedRun | None, hooks: Hooks
) -> TrainResult:
    hp = cfg.train
    say = functools.partial(print, file=sys.stderr, flush=True) if d.is_main else _quiet

    # Data: the staged arrays, once, on this rank's device.
    data = load_dataset(args.dataset, cfg.storage, d.device)
    if len(data.train_labels) < hp.batch_size:
        raise ConfigError(
            f"train.batch_size={hp.batch_size} exceeds the {len(data.train_labels)} "
            f"training images of {args.dataset}"
        )
    training = build_training(hp, data, d)

    # Resume from the newest intact checkpoint of this output, if there is one.
    store = open_store(args.output, cfg.storage)
    identity = {"architecture": hp.model, "width": hp.width, "dataset_digest": data.digest}
    progress = resume(store, d, identity, training.modules, say)
    if progress:
        say(f"resumed after epoch {progress.epoch} of {hp.epochs}")
    else:
        progress = Progress()
    start_epoch, done_before = progress.epoch, len(progress.history)
    wrap_model(training, hp, d)  # DDP, torch.compile: after the resume loaded the weights
    if tracked:
        log_start(tracked, cfg, data, store.root)
    say(
        f"training {hp.model} on {len(data.train_labels):,} images: {d.world_size} rank(s) on "
        f"{d.device.type}, {training.train_batches.steps_per_epoch} steps of {hp.batch_size} "
        f"per epoch{', bf16 autocast' if training.use_bf16 else ''}"
    )

    ctx = RunContext(hp, d, store, identity, tracked, say, hooks)
    totals = run_epochs(ctx, training, progress)
    if totals is None:  # resumed after the last epoch: evaluate the restored weights
        test, confusion = evaluate(
            training.raw, training.test_batches, training.num_classes, training.autocast
        )
        totals = EpochTotals(test.new_zeros(3), test, confusion).all_reduced(d)
    test_acc = totals.test_accuracy
    speeds = [h["images_per_s"] for h in progress.history[done_before:]]  # this attempt's

    # Outputs: weights, then model.json (which publishes them), then MLflow.
    meta = model_meta(hp, data, args.dataset, test_acc, progress.epoch)
    if d.is_main:
        write_model(store, training.raw, meta)
    hooks.at_end(training.raw, start_epoch, d)
    if tracked:
        matrix = totals.confusion.long().cpu().numpy()
        example = next(training.test_batches.ordered(2))[0]
        logged = log_final(tracked, training.raw, example, matrix, meta, progress)
        say(f"MLflow model {logged}")
    return TrainResult(
        model_uri=store.root,
        test_accuracy=test_acc,
        epochs=progress.epoch,
        start_epoch=start_epoch,
        world_size=d.world_size,
        device=str(d.device),
        train_seconds=progress.train_seconds,
        time_to_target_s=progress.time_to_target_s,
        images_per_s=sum(speeds) / len(speeds) if speeds else None,
        mlflow_run_id=tracked.run_id if tracked else None,
        history=progress.history,
    )


def run_epochs(ctx: RunContext, t: Training, progress: Progress) -> EpochTotals | None:
    """Train, evaluate and checkpoint epoch after epoch, until the epoch count or the target
    accuracy; ``progress`` grows as it goes. Returns the last epoch's totals over all ranks
    (None when no epoch was left to run)."""
    hp, d, say = ctx.hp, ctx.d, ctx.say
    start_epoch = progress.epoch
    end_epoch = start_epoch if progress.time_to_target_s is not None else hp.epochs
    totals = None
    for epoch in range(start_epoch, end_epoch):
        tic = time.perf_counter()
        train_sums = train_one_epoch(t, epoch)
        if d.device.type == "cuda":
            torch.cuda.synchronize()  # the epoch's time: the device's queue drained
        seconds = time.perf_counter() - tic
        average_buffers(t.raw, d)  # BatchNorm statistics: the mean over ranks
        test_sums, confusion = evaluate(t.raw, t.test_batches, t.num_classes, t.autocast)
        totals = EpochTotals(train_sums, test_sums, confusion).all_reduced(d)
        lr = t.optimizer.param_groups[0]["lr"]
        metrics = epoch_metrics(
            totals, lr, seconds, t.train_batches.steps_per_epoch * hp.batch_size
        )
        progress.history.append({"epoch": epoch + 1, **metrics})
        test_acc = metrics["test_accuracy"]
        reached = hp.target_accuracy is not None and test_acc >= hp.target_accuracy
        progress.train_seconds += seconds
        if reached:
            progress.time_to_target_s = progress.train_seconds
        progress.epoch = epoch + 1
        last = reached or epoch + 1 == hp.epochs
        say(
            f"epoch {epoch + 1}/{hp.epochs}  train loss {metrics['train_loss']:.4f} acc "
            f"{metrics['train_accuracy']:.4f}  test loss {metrics['test_loss']:.4f} acc "
            f"{test_acc:.4f}  {metrics['images_per_s']:,.0f} img/s  {seconds:.2f} s"
        )
        if ctx.tracked:
            ctx.tracked.log_metrics(metrics, step=epoch + 1)
        if d.is_main and ((epoch + 1) % hp.checkpoint_every == 0 or last):
            state = training_state(epoch + 1, ctx.identity, t.modules, progress)
            say(f"checkpoint {save_checkpoint(ctx.store, epoch + 1, state, hp.keep_checkpoints)}")
        ctx.hooks.after_epoch(epoch + 1, last, d)
        if reached:
            say(
                f"reached test accuracy {test_acc:.4f} >= {hp.target_accuracy} after "
                f"{progress.time_to_target_s:.1f} s of training"
            )
            break
    return totals


def _quiet(*_args, **_kwargs) -> None:
    """``say`` on ranks other than 0."""
