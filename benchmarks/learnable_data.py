"""Synthetic CIFAR-shaped data that a network can learn, for timing training to a fixed
accuracy where CIFAR-10 itself cannot be downloaded (a bare GPU machine, CI).

Random pixels with random labels time an epoch but never reach an accuracy. Here each class
is a smooth colour pattern (4 x 4 random values, upsampled bicubically to 32 x 32); an
image is its class's pattern at a random contrast, over smooth clutter (another random
8 x 8 field upsampled) and per-pixel noise, as uint8 ``N x 32 x 32 x 3`` like the staged
arrays. The random crop and flip of the trainer keep a smooth pattern recognisable, the
clutter and noise keep the task from being solved in one step: ResNet-9 needs a few
epochs to pass 90% here, the seed articles' loop many more.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from steps.train.data import Dataset

CLASSES = 10
SIGNAL = 0.12  # the pattern's contrast (mean), on 0..1 pixels
CLUTTER = 0.5  # the smooth clutter's amplitude
NOISE = 0.15  # the per-pixel noise's standard deviation
CHUNK = 8192  # images made at a time (bounded host memory)


def _smooth(n: int, cells: int, generator: torch.Generator) -> torch.Tensor:
    """``n x 3 x 32 x 32`` smooth random fields in about -0.5..0.5."""
    coarse = torch.rand(n, 3, cells, cells, generator=generator) - 0.5
    return F.interpolate(coarse, size=32, mode="bicubic", align_corners=False)


def _images(
    labels: torch.Tensor, patterns: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    parts = []
    for chunk in labels.split(CHUNK):
        n = len(chunk)
        contrast = SIGNAL * (0.5 + torch.rand(n, 1, 1, 1, generator=generator))
        pixels = (
            0.5
            + contrast * patterns[chunk] / patterns.abs().amax()
            + CLUTTER * _smooth(n, 8, generator)
            + NOISE * torch.randn(n, 3, 32, 32, generator=generator)
        )
        parts.append((pixels.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1))
    return torch.cat(parts).contiguous()


def learnable_cifar(train: int, test: int, device: torch.device, seed: int = 0) -> Dataset:
    """``train`` + ``test`` images (uint8 ``N x 32 x 32 x 3``) and labels on ``device``; the
    same seed gives the same data on any machine."""
    generator = torch.Generator().manual_seed(seed)
    patterns = _smooth(CLASSES, 4, generator)
    train_labels = torch.randint(0, CLASSES, (train,), generator=generator)
    test_labels = torch.randint(0, CLASSES, (test,), generator=generator)
    train_images = _images(train_labels, patterns, generator)
    test_images = _images(test_labels, patterns, generator)
    return Dataset(
        uri=f"synthetic://learnable-cifar?seed={seed}",
        name="learnable-cifar",
        digest=f"seed-{seed}",
        classes=[f"pattern-{k}" for k in range(CLASSES)],
        train_images=train_images.to(device),
        train_labels=train_labels.to(device),
        test_images=test_images.to(device),
        test_labels=test_labels.to(device),
    )
