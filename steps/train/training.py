"""What the epoch loop works on, built from the train settings: one rank's batches, the
network on its device, SGD with nesterov momentum, the one-cycle schedule, label-smoothed
cross-entropy and bf16 autocast where it pays. Plain torch, like ``data`` and ``loop``:
``benchmarks/gpu.py`` builds the trainer's own set-up on a machine without pydantic.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from steps.common.models import build_model
from steps.train.data import Batches, Dataset
from steps.train.distributed import Dist
from steps.train.loop import one_cycle, use_bf16_autocast

if TYPE_CHECKING:  # read by attribute only: any object with TrainConfig's fields will do
    from steps.common.config import TrainConfig


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
