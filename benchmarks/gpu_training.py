"""``gpu.py``'s training loops, run in its children: the seed articles' loop, and the
pipeline's trainer itself (``steps.train.loop``'s set-up and epoch) with each epoch's host
synchronisations counted on a GPU. Plain torch, like the rest of ``gpu.py``'s path.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch

from benchmarks.gpu_report import TrainRow
from benchmarks.seed_loop import SeedLoop
from steps.train.data import Dataset
from steps.train.distributed import Dist
from steps.train.loop import build_training, evaluate, train_one_epoch, wrap_model

SEED_LOOP = "seed loop: SimpleCNN, DataLoader + PIL, batch 64, fp32"


@dataclass(frozen=True)
class TrainSettings:
    """``TrainConfig``'s fields that ``build_training`` and ``wrap_model`` read, with its
    defaults (a test holds them equal): the config model itself needs pydantic, which the
    machine lacks."""

    model: Literal["resnet9", "simplecnn"] = "resnet9"
    epochs: int = 10
    batch_size: int = 512
    lr: float = 0.2
    momentum: float = 0.9
    weight_decay: float = 5e-4
    label_smoothing: float = 0.2
    warmup_epochs: float = 2.0
    seed: int = 0
    amp_bf16: bool = True
    amp_bf16_cpu: bool | Literal["auto"] = "auto"
    channels_last: bool = True
    compile: bool = False
    compile_mode: str = "default"
    width: int = 64
    crop_padding: int = 4


def timed(device: torch.device, work: Callable[[], Any]) -> float:
    """Seconds for one call of ``work``, the device's queue drained at both ends."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    tic = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - tic


@contextlib.contextmanager
def host_syncs(device: torch.device, counts: list[int]) -> Iterator[None]:
    """Count the host synchronisations CUDA's sync debug mode reports inside the block
    (appended to ``counts``); nothing to count on a CPU."""
    if device.type != "cuda":
        yield
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
    counts.append(sum("synchroniz" in str(w.message) for w in caught))


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def train_seed_loop(data: Dataset, device: torch.device, target: float, seconds: float):
    loop = SeedLoop(data.train_images.cpu().numpy(), data.train_labels.cpu().numpy(), device)
    row = TrainRow(SEED_LOOP, len(loop.loader.dataset))
    while sum(row.epoch_s) < seconds:
        row.epoch_s.append(timed(device, loop.epoch))
        row.accuracy.append(loop.accuracy(data.test_images, data.test_labels))
        if row.accuracy[-1] >= target:
            row.to_target_s = sum(row.epoch_s)
            break
    return row


def train_ours(label: str, hp: TrainSettings, data: Dataset, device: torch.device, target: float):
    """The trainer's set-up and epoch loop (``steps.train.fit.run_epochs`` without its
    checkpoints and MLflow): returns the row and the trained network."""
    d = Dist(0, 1, 0, device)
    t = build_training(hp, data, d)
    wrap_model(t, hp, d)
    row = TrainRow(label, t.train_batches.steps_per_epoch * hp.batch_size)
    row.host_syncs = [] if device.type == "cuda" else None
    for epoch in range(hp.epochs):
        counts: list[int] = []  # the epoch's training, then its evaluation

        def one_epoch(e: int = epoch, counts: list[int] = counts) -> None:
            with host_syncs(device, counts):
                train_one_epoch(t, e)

        row.epoch_s.append(timed(device, one_epoch))
        with host_syncs(device, counts):
            sums, _ = evaluate(t.raw, t.test_batches, t.num_classes, t.autocast)
        if row.host_syncs is not None:
            row.host_syncs.append(sum(counts))
        row.accuracy.append(float(sums[1] / sums[2]))
        say(f"  epoch {epoch + 1}: {row.epoch_s[-1]:.2f} s, test accuracy {row.accuracy[-1]:.4f}")
        if row.accuracy[-1] >= target:
            row.to_target_s = sum(row.epoch_s)
            break
    return row, t.raw
