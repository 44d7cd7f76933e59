"""The seed articles' training loop, the baseline the trainer is measured against: the
PyTorch CIFAR-10 tutorial's ``DataLoader`` (no workers) over a dataset that makes a PIL
image per sample, ``ToTensor`` + ``Normalize((0.5,) * 3, (0.5,) * 3)``, batch 64, SGD
(lr 0.001, momentum 0.9), cross-entropy, the SimpleCNN. Used by ``train_throughput.py``
and ``gpu.py``; torch, torchvision and PIL only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from PIL import Image
from torch import nn
from torchvision import transforms

from steps.common.models import SimpleCNN

BATCH = 64


class PILDataset(torch.utils.data.Dataset):
    """What ``torchvision.datasets.CIFAR10`` does per sample: a PIL image, then transforms."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform: Callable) -> None:
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.images[index])), int(self.labels[index])


def tutorial_normalise(images: torch.Tensor) -> torch.Tensor:
    """The tutorial's ``ToTensor`` + ``Normalize`` on a uint8 ``N x 32 x 32 x 3`` batch at
    once (for evaluation, where the per-sample PIL path is not what is measured)."""
    return (images.permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.5


class SeedLoop:
    """The tutorial's net, optimizer and loader over uint8 ``N x 32 x 32 x 3`` images;
    ``epoch()`` trains one pass, ``accuracy()`` scores a held-out split."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, device: torch.device) -> None:
        transform = transforms.Compose(
            [transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
        )
        self.loader = torch.utils.data.DataLoader(
            PILDataset(images, labels, transform), batch_size=BATCH, shuffle=True, num_workers=0
        )
        self.device = device
        self.net = SimpleCNN().to(device)
        self.criterion = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.001, momentum=0.9)

    def epoch(self) -> None:
        self.net.train()
        for inputs, targets in self.loader:
            inputs, targets = inputs.to(self.device), targets.to(self.device)
            self.optimizer.zero_grad()
            loss = self.criterion(self.net(inputs), targets)
            loss.backward()
            self.optimizer.step()

    @torch.no_grad()
    def accuracy(self, images: torch.Tensor, labels: torch.Tensor) -> float:
        self.net.eval()
        correct = 0
        for batch, truth in zip(images.split(1024), labels.split(1024), strict=True):
            logits = self.net(tutorial_normalise(batch.to(self.device)))
            correct += int((logits.argmax(1) == truth.to(self.device)).sum())
        return correct / len(labels)
