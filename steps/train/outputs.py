"""The training step's outputs: ``weights.pt`` and then ``model.json``, which publishes them
(rank 0 writes both)."""

from __future__ import annotations

import io
import json
from typing import Any

import torch

from steps.common.config import TrainConfig
from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE
from steps.common.storage import Store
from steps.train.data import Dataset


def model_meta(
    hp: TrainConfig, data: Dataset, dataset_uri: str, test_accuracy: float, epochs: int
) -> dict[str, Any]:
    """``model.json``: what the optimize, benchmark and predict steps need to rebuild it."""
    return {
        "architecture": hp.model,
        "num_classes": len(data.classes),
        "classes": data.classes,
        "mean": list(CIFAR10_MEAN),
        "std": list(CIFAR10_STD),
        "input_shape": list(INPUT_SHAPE),
        "dataset_uri": dataset_uri,
        "dataset_digest": data.digest,
        "test_accuracy": test_accuracy,
        "epochs": epochs,
        "width": hp.width,  # build_model(architecture, num_classes, width)
    }


def write_model(store: Store, model: torch.nn.Module, meta: dict[str, Any]) -> None:
    """``weights.pt`` (CPU state dict), then ``model.json``, which publishes the model."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    store.write_bytes("weights.pt", buffer.getvalue())
    store.write_bytes("model.json", json.dumps(meta, indent=2).encode())
