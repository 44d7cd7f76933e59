"""The classifiers, shared by training, optimization, benchmarking and prediction.

Only network definitions and the constants a consumer needs to feed them live here: a
model is rebuilt from ``model.json`` (``architecture``, ``num_classes``, ``width``) with
``build_model`` and its ``weights.pt`` state dict. Inputs are float ``N x 3 x 32 x 32``,
normalised with ``CIFAR10_MEAN`` / ``CIFAR10_STD`` (per channel, on 0..1 pixels).
"""

from __future__ import annotations

import torch
from torch import nn

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
INPUT_SHAPE = (3, 32, 32)
ARCHITECTURES = ("resnet9", "simplecnn")


class SimpleCNN(nn.Module):
    """The seed articles' net (the PyTorch CIFAR-10 tutorial): two 5x5 convs, three FCs."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def conv_bn(channels_in: int, channels_out: int) -> nn.Sequential:
    """3x3 convolution (no bias: BatchNorm follows), BatchNorm, ReLU."""
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(channels_out),
        nn.ReLU(inplace=True),
    )


class Residual(nn.Sequential):
    """``x + f(x)`` for the layers it holds."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + super().forward(x)


class ResNet9(nn.Module):
    """The DAWNBench / airbench ResNet-9 (Myrtle.ai's "How to train your ResNet").

    ``width`` is the first layer's channel count; the stages use 1, 2, 4 and 8 times it.
    ``width=64`` is the published net (6.57 M parameters); 16 makes a 0.4 M toy for tests.
    The logits are scaled by 1/8, which keeps the softmax soft early in training.
    """

    def __init__(self, num_classes: int = 10, width: int = 64) -> None:
        super().__init__()
        w = width
        self.features = nn.Sequential(
            conv_bn(3, w),
            conv_bn(w, 2 * w),
            nn.MaxPool2d(2),
            Residual(conv_bn(2 * w, 2 * w), conv_bn(2 * w, 2 * w)),
            conv_bn(2 * w, 4 * w),
            nn.MaxPool2d(2),
            conv_bn(4 * w, 8 * w),
            nn.MaxPool2d(2),
            Residual(conv_bn(8 * w, 8 * w), conv_bn(8 * w, 8 * w)),
            nn.AdaptiveMaxPool2d(1),
            nn.Flatten(),
        )
        self.classifier = nn.Linear(8 * w, num_classes, bias=False)
        self.scale = 0.125

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x)) * self.scale


def build_model(name: str, num_classes: int = 10, width: int = 64) -> nn.Module:
    """A freshly initialised network by architecture name (``model.json``'s)."""
    if name == "resnet9":
        return ResNet9(num_classes, width)
    if name == "simplecnn":
        return SimpleCNN(num_classes)
    raise ValueError(f"unknown architecture {name!r}; expected one of {', '.join(ARCHITECTURES)}")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
