"""The training step's inner loop: the one-cycle schedule, one epoch of training, and the
evaluation of a rank's test shard. Each returns sums on the device (no host sync per
step); the caller all-reduces them across ranks once per epoch (``steps.train.totals``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from steps.common.device import cpu_bf16_features
from steps.train.data import Batches

if TYPE_CHECKING:  # read by attribute only, so the loop imports no pydantic
    from steps.common.config import TrainConfig

EVAL_BATCH = 1024  # test images per forward pass and rank


# --- schedule ----------------------------------------------------------------------------
def one_cycle(total_steps: int, warmup_steps: int):
    """lr factor per optimizer step: linear up to 1 over the warm-up, then linear to 0."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


# --- loop --------------------------------------------------------------------------------
def train_one_epoch(model, batches: Batches, epoch, optimizer, scheduler, criterion, autocast):
    """One pass over this rank's batches; returns [loss sum, correct, images] on the device."""
    model.train()
    loss_sum = torch.zeros((), device=batches.images.device)
    correct = torch.zeros((), device=batches.images.device, dtype=torch.long)
    seen = 0
    for images, labels in batches.epoch(epoch):
        with autocast():
            logits = model(images)
            loss = criterion(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        loss_sum += loss.detach().float() * len(labels)  # no host sync per step
        correct += (logits.detach().argmax(1) == labels).sum()
        seen += len(labels)
    return torch.stack(
        [loss_sum.double(), correct.double(), torch.tensor(seen).double().to(loss_sum.device)]
    )


@torch.no_grad()
def evaluate(
    model: nn.Module, batches: Batches, num_classes: int, autocast
) -> tuple[torch.Tensor, torch.Tensor]:
    """[loss sum, correct, images] and the confusion matrix (classes x classes, true class
    by row) over this rank's test shard, both float64 on the device."""
    model.eval()
    device = batches.images.device
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    confusion = torch.zeros(num_classes * num_classes, device=device, dtype=torch.long)
    for images, labels in batches.ordered(EVAL_BATCH):
        with autocast():
            logits = model(images).float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").double()
        confusion += torch.bincount(
            labels * num_classes + logits.argmax(1), minlength=num_classes**2
        )
    matrix = confusion.view(num_classes, num_classes)
    sums = torch.stack([loss_sum, matrix.diagonal().sum().double(), confusion.sum().double()])
    return sums, matrix.double()


def use_bf16_autocast(hp: TrainConfig, device: torch.device) -> bool:
    """bf16 autocast on a GPU by ``amp_bf16``; on a CPU by ``amp_bf16_cpu``, whose ``auto``
    means: where the CPU has BF16 units (without them PyTorch emulates BF16, slower)."""
    if device.type == "cuda":
        return hp.amp_bf16
    if hp.amp_bf16_cpu == "auto":
        return bool(cpu_bf16_features())
    return hp.amp_bf16_cpu
