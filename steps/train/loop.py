"""The trainer's schedule and loop, top to bottom: the set-up from the train settings (one
rank's batches, the network, fused SGD with nesterov momentum, the one-cycle schedule,
label-smoothed cross-entropy, bf16 autocast where it pays), one epoch of training, the
evaluation of a rank's test shard, and the epoch's totals.

The loop never waits for the device (airbench94's rule): the loss and the correct
predictions add up on the device and are read once an epoch, after one all-reduce of all
the sums (``EpochTotals``); nothing in a step copies to or from the host or reads a value.
Plain torch, like ``data``: ``benchmarks/gpu.py`` runs the trainer's own set-up and loop
on a machine without pydantic.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from steps.common.device import cpu_bf16_features
from steps.common.models import build_model
from steps.train.data import Batches, Dataset
from steps.train.distributed import Dist, all_reduce_sum

if TYPE_CHECKING:  # read by attribute only: any object with TrainConfig's fields will do
    from steps.common.config import TrainConfig

EVAL_BATCH = 1024  # test images per forward pass and rank


# --- set-up ------------------------------------------------------------------------------
def one_cycle(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """lr factor per optimizer step: linear up to 1 over the warm-up, then linear to 0."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def use_bf16_autocast(hp: TrainConfig, device: torch.device) -> bool:
    """bf16 autocast on a GPU by ``amp_bf16``; on a CPU by ``amp_bf16_cpu``, whose ``auto``
    means: where the CPU has BF16 units (without them PyTorch emulates BF16, slower)."""
    if device.type == "cuda":
        return hp.amp_bf16
    if hp.amp_bf16_cpu == "auto":
        return bool(cpu_bf16_features())
    return hp.amp_bf16_cpu


def sgd(params: list[nn.Parameter], hp: TrainConfig) -> torch.optim.SGD:
    """SGD with nesterov momentum, fused (one kernel updates every parameter) where this
    torch has the kernel for the parameters' device: CUDA, and the CPU since torch 2.4."""
    settings = {
        "lr": hp.lr,
        "momentum": hp.momentum,
        "nesterov": hp.momentum > 0,
        "weight_decay": hp.weight_decay,
    }
    try:
        return torch.optim.SGD(params, fused=True, **settings)
    except RuntimeError:  # "`fused=True` requires ... Tensors of supported devices"
        return torch.optim.SGD(params, **settings)


@dataclass
class Training:
    """What the epoch loop works on: one rank's batches, the network and its schedule."""

    train_batches: Batches
    test_batches: Batches
    num_classes: int
    raw: nn.Module  # the network itself, for state dicts and evaluation
    model: nn.Module  # what the loop calls: DDP and/or torch.compile around ``raw``
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    criterion: nn.Module
    autocast: Callable[[], Any]
    use_bf16: bool
    cuda_graphs: bool = False  # compiled to replay each step as a CUDA graph

    @property
    def modules(self) -> dict[str, Any]:
        """What a checkpoint saves and a resume restores."""
        return {"model": self.raw, "optimizer": self.optimizer, "scheduler": self.scheduler}


def build_training(hp: TrainConfig, data: Dataset, d: Dist) -> Training:
    """This rank's batches, the network on its device, SGD and the one-cycle schedule."""
    channels_last = hp.channels_last  # oneDNN on CPU gains from it too (~20%)
    shard = {"rank": d.rank, "world_size": d.world_size, "channels_last": channels_last}
    train_batches = Batches(
        data.train_images, data.train_labels, global_batch=hp.batch_size, seed=hp.seed,
        crop_padding=hp.crop_padding, **shard,
    )  # fmt: skip
    test_batches = Batches(data.test_images, data.test_labels, global_batch=hp.batch_size, **shard)
    num_classes = len(data.classes)
    if d.device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # every training batch has the same shape

    torch.manual_seed(hp.seed)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    raw = build_model(hp.model, num_classes, hp.width).to(d.device, memory_format=memory_format)
    optimizer = sgd(list(raw.parameters()), hp)
    steps_per_epoch = train_batches.steps_per_epoch
    total_steps = hp.epochs * steps_per_epoch
    warmup_steps = min(round(hp.warmup_epochs * steps_per_epoch), total_steps - 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, one_cycle(total_steps, warmup_steps))
    use_bf16 = use_bf16_autocast(hp, d.device)
    bf16 = functools.partial(torch.autocast, d.device.type, dtype=torch.bfloat16)
    return Training(
        train_batches=train_batches,
        test_batches=test_batches,
        num_classes=num_classes,
        raw=raw,
        model=raw,
        optimizer=optimizer,
        scheduler=scheduler,
        criterion=nn.CrossEntropyLoss(label_smoothing=hp.label_smoothing),
        autocast=bf16 if use_bf16 else contextlib.nullcontext,
        use_bf16=use_bf16,
    )


def wrap_model(t: Training, hp: TrainConfig, d: Dist) -> None:
    """What the loop calls: DistributedDataParallel around the network when there are
    ranks, then ``torch.compile`` when ``train.compile`` asks (``train.compile_mode``). Done
    after a resume has loaded the weights: DDP sends rank 0's to the others."""
    if d.distributed:
        device_ids = [d.device.index] if d.device.type == "cuda" else None
        t.model = DistributedDataParallel(t.raw, device_ids=device_ids)
    if hp.compile:
        t.model = torch.compile(t.model, mode=hp.compile_mode)
        t.cuda_graphs = d.device.type == "cuda" and hp.compile_mode == "reduce-overhead"


# --- the loop ----------------------------------------------------------------------------
def train_one_epoch(t: Training, epoch: int) -> torch.Tensor:
    """One pass over this rank's batches; returns [loss sum, correct, images] (float64) on
    the device, left there: the caller reads it once, after the epoch."""
    t.model.train()
    device = t.train_batches.images.device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen = 0
    for images, labels in t.train_batches.epoch(epoch):
        if t.cuda_graphs:  # a new step: the graphs' outputs of the last one may be reused
            torch.compiler.cudagraph_mark_step_begin()
        with t.autocast():
            logits = t.model(images)
            loss = t.criterion(logits, labels)
        t.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t.optimizer.step()
        t.scheduler.step()  # the lr is a Python float: no device value read
        loss_sum += loss.detach().float() * len(labels)
        correct += (logits.detach().argmax(1) == labels).sum()
        seen += len(labels)
    images_seen = torch.full((), seen, device=device, dtype=torch.float64)
    return torch.stack([loss_sum.double(), correct.double(), images_seen])


@torch.no_grad()
def evaluate(
    model: nn.Module, batches: Batches, num_classes: int, autocast: Callable[[], Any]
) -> tuple[torch.Tensor, torch.Tensor]:
    """[loss sum, correct, images] and the confusion matrix (classes x classes, true class
    by row) over this rank's test shard, both float64 on the device. The matrix is counted
    by ``scatter_add_``, not ``bincount``, which reads its input's maximum on the host."""
    model.eval()
    device = batches.images.device
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    confusion = torch.zeros(num_classes * num_classes, device=device, dtype=torch.long)
    for images, labels in batches.ordered(EVAL_BATCH):
        with autocast():
            logits = model(images).float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").double()
        cells = labels * num_classes + logits.argmax(1)
        confusion.scatter_add_(0, cells, torch.ones_like(cells))
    matrix = confusion.view(num_classes, num_classes)
    sums = torch.stack([loss_sum, matrix.diagonal().sum().double(), confusion.sum().double()])
    return sums, matrix.double()


# --- the epoch's totals ------------------------------------------------------------------
def rates(sums: torch.Tensor) -> tuple[float, float]:
    """(mean loss, accuracy) from [loss sum, correct, images]: reads the device."""
    return (sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()


@dataclass(frozen=True)
class EpochTotals:
    """An epoch's sums by name. Each rank's loop leaves them on the device; ``all_reduced``
    adds them over the ranks in one all-reduce of a flat float64 tensor."""

    train: torch.Tensor  # [loss sum, correct, images] over the training batches
    test: torch.Tensor  # [loss sum, correct, images] over the test split
    confusion: torch.Tensor  # classes x classes: true class by row, predicted by column

    def to_tensor(self) -> torch.Tensor:
        return torch.cat([self.train, self.test, self.confusion.reshape(-1)])

    @classmethod
    def from_tensor(cls, flat: torch.Tensor, num_classes: int) -> EpochTotals:
        train, test, confusion = flat.split([3, 3, num_classes * num_classes])
        return cls(train, test, confusion.view(num_classes, num_classes))

    def all_reduced(self, d: Dist) -> EpochTotals:
        """The sums over every rank (these, on one process)."""
        flat = all_reduce_sum(self.to_tensor(), d)
        return EpochTotals.from_tensor(flat, self.confusion.shape[0])

    @property
    def test_accuracy(self) -> float:
        return rates(self.test)[1]


def epoch_metrics(totals: EpochTotals, lr: float, seconds: float, images: int) -> dict:
    """An epoch's figures from its all-reduced totals."""
    (train_loss, train_acc), (test_loss, test_acc) = rates(totals.train), rates(totals.test)
    return {
        "train_loss": train_loss,
        "train_accuracy": train_acc,
        "test_loss": test_loss,
        "test_accuracy": test_acc,
        "lr": lr,
        "images_per_s": images / seconds,
        "epoch_seconds": seconds,
    }
