"""An epoch's totals, named: the training and test sums (loss sum, correct predictions,
images) and the test confusion matrix, and the figures the trainer logs from them.

Each rank's loop returns its sums on the device; ``all_reduced`` adds them over the ranks
in one all-reduce of a flat float64 tensor (``to_tensor`` / ``from_tensor``), so no host
sync per step and one collective per epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from steps.train.distributed import Dist, all_reduce_sum


def rates(sums: torch.Tensor) -> tuple[float, float]:
    """(mean loss, accuracy) from [loss sum, correct, images]."""
    return (sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()


@dataclass(frozen=True)
class EpochTotals:
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
