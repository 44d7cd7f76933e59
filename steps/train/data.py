"""The training step's data path: the staged uint8 arrays held in memory on the training
device, each rank's share of every global batch, augmentation as batched tensor ops. Plain
torch: ``benchmarks/gpu.py`` runs it on a machine with no pydantic, MLflow or boto3.

No DataLoader, no PIL, no per-image Python: a batch is one gather from the uint8 images
with the random crop (reflect padding) and the horizontal flip folded into the gather's
indices, then one fused multiply-add that converts to float and normalises. Images stay
``N x 32 x 32 x 3`` as staged, so a gathered batch viewed as ``N x 3 x 32 x 32`` is
already in channels_last layout. Every batch of an epoch has the same shape (the tail is
dropped), so a compiled step is compiled once and can replay as a CUDA graph.

Nothing here waits for the device: the epoch's order and its random shifts and flips are
drawn on the host when the epoch starts and cross to the device in one copy each, so the
host can queue step after step while the device works.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE

SIDE = INPUT_SHAPE[-1]  # images are SIDE x SIDE pixels


@dataclass
class Dataset:
    """A staged dataset in memory: images uint8 ``N x 32 x 32 x 3``, labels int64 ``N``."""

    uri: str
    name: str
    digest: str
    classes: list[str]
    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor


def epoch_order(n: int, global_batch: int, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's global batches, ``steps x global_batch`` sample indices (tail dropped).

    Every rank computes the same permutation from (seed, epoch); rank r of w then takes
    columns ``r*b .. (r+1)*b`` (b = global_batch / w), so the union of the ranks' batches
    at each step is the same global batch for any world size, and a resumed epoch sees
    the same order as the interrupted one.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    steps = n // global_batch
    return torch.randperm(n, generator=generator)[: steps * global_batch].view(steps, global_batch)


def _reflect(index: torch.Tensor) -> torch.Tensor:
    """Indices in ``-p .. 31+p`` mapped into the image as reflect padding does."""
    index = index.abs()
    return torch.where(index > SIDE - 1, 2 * (SIDE - 1) - index, index)


def crop_flip(
    images: torch.Tensor, index: torch.Tensor, shifts: torch.Tensor, flips: torch.Tensor
) -> torch.Tensor:
    """One gather from uint8 ``N x 32 x 32 x 3`` images: for sample i, ``images[index[i]]``
    shifted by ``shifts[i] = (dy, dx)`` with reflect padding, mirrored when ``flips[i]``.
    The flip is folded into the column indices, so no intermediate batch is made.
    Returns ``n x 3 x 32 x 32`` (a channels_last view of the gathered ``n x 32 x 32 x 3``)."""
    n = len(index)
    pixels = torch.arange(SIDE, device=images.device)
    cols = torch.where(flips[:, None], SIDE - 1 - pixels, pixels)
    rows = _reflect(shifts[:, :1] + pixels)
    cols = _reflect(shifts[:, 1:] + cols)
    offsets = (
        (index * (SIDE * SIDE * 3)).view(n, 1, 1, 1)
        + (rows * (SIDE * 3)).view(n, SIDE, 1, 1)
        + (cols * 3).view(n, 1, SIDE, 1)
        + torch.arange(3, device=images.device).view(1, 1, 1, 3)
    )
    return images.view(-1).take(offsets).permute(0, 3, 1, 2)


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` on ``device``; to a GPU from pinned memory without blocking the host (the
    copy is queued on the stream like the kernels that read it)."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


class Batches:
    """One rank's batches: iterate ``epoch(e)`` for training, ``ordered()`` for evaluation."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        global_batch: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        crop_padding: int = 4,
        flip: bool = True,
        channels_last: bool = False,
    ) -> None:
        self.images, self.labels = images, labels
        self.global_batch, self.rank, self.world_size = global_batch, rank, world_size
        self.local_batch = global_batch // world_size
        self.seed, self.padding, self.flip = seed, crop_padding, flip
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        device = images.device
        std = torch.tensor(CIFAR10_STD, device=device).view(1, 3, 1, 1)
        mean = torch.tensor(CIFAR10_MEAN, device=device).view(1, 3, 1, 1)
        self.scale, self.shift = 1.0 / (255.0 * std), -mean / std  # x/255 - mean) / std

    @property
    def steps_per_epoch(self) -> int:
        return len(self.images) // self.global_batch

    def normalize(self, batch: torch.Tensor) -> torch.Tensor:
        """uint8 ``n x 3 x 32 x 32`` (channels_last view) -> float ``(x / 255 - mean) / std``,
        converted and normalised by one fused multiply-add."""
        out = torch.addcmul(self.shift, batch, self.scale)
        return out.contiguous(memory_format=self.memory_format)  # a no-op for channels_last

    def augmentation(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The epoch's random shifts (``steps x n x 2``, each up to ``crop_padding`` pixels:
        a crop of the reflect-padded image) and flips (``steps x n``, probability 1/2), on
        the host. A function of (seed, epoch, rank), so a resumed epoch draws the same; drawn
        step by step, shifts then flips, the order the trainer has always drawn them in."""
        generator = torch.Generator().manual_seed(
            (self.seed * 1_000_003 + epoch) * 4099 + self.rank
        )
        n, p = self.local_batch, self.padding
        shifts = torch.empty(self.steps_per_epoch, n, 2, dtype=torch.long)
        flips = torch.empty(self.steps_per_epoch, n, dtype=torch.bool)
        for step in range(self.steps_per_epoch):
            torch.randint(-p, p + 1, (n, 2), generator=generator, out=shifts[step])
            flips[step] = (torch.rand(n, generator=generator) < 0.5) & self.flip
        return shifts, flips

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's augmented, normalised share of each of the epoch's global batches."""
        order = epoch_order(len(self.images), self.global_batch, self.seed, epoch)
        start = self.rank * self.local_batch
        mine = order[:, start : start + self.local_batch]
        indices, shifts, flips = (
            to_device(host, self.images.device) for host in (mine, *self.augmentation(epoch))
        )
        for index, shift, flip in zip(indices, shifts, flips, strict=True):
            batch = crop_flip(self.images, index, shift, flip)
            yield self.normalize(batch), self.labels[index]

    def ordered(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's shard (every world_size-th sample) in order, unaugmented."""
        mine = torch.arange(self.rank, len(self.images), self.world_size, device=self.images.device)
        for index in mine.split(batch_size):
            yield self.normalize(self.images[index].permute(0, 3, 1, 2)), self.labels[index]
