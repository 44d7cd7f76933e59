"""The trained model loaded back, and what optimize, benchmark and predict share with it:
the test split, the input contract, normalisation and batching (a ``Runner``).

The input contract: every variant, like the eager model and the signature the trainer logs,
takes float ``N x 3 x 32 x 32`` (NCHW) already normalised with ``model.json``'s mean and std
(per channel, on 0..1 pixels). Normalisation is not baked into the variants: a consumer
normalises once with ``normalize`` (the trainer's own fused multiply-add), and the exported
graphs stay identical to the trained network, so their parity with eager is exact to
rounding. ``variants.json`` records the contract next to the files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from steps.common.config import StorageConfig
from steps.common.dataset import read_manifest, read_split
from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE, build_model
from steps.common.storage import open_store
from steps.common.weights import WeightsError, load_weights, require_state_dict

# A variant's input dtype by its precision; INT8 variants take float32 and quantize inside.
DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "int8": torch.float32,
}
Runner = Callable[[torch.Tensor], torch.Tensor]


class InputError(ValueError):
    """A URI or file given on the command line does not hold what the step needs."""


@dataclass
class TrainedModel:
    uri: str
    model: nn.Module
    meta: dict[str, Any]
    weights_sha256: str

    @property
    def mean(self) -> tuple[float, ...]:
        return tuple(self.meta.get("mean", CIFAR10_MEAN))

    @property
    def std(self) -> tuple[float, ...]:
        return tuple(self.meta.get("std", CIFAR10_STD))

    @property
    def classes(self) -> list[str]:
        return list(self.meta.get("classes") or range(self.meta["num_classes"]))


@dataclass
class TestSplit:
    """The staged test split: uint8 ``N x 3 x 32 x 32`` and int64 labels, on the CPU."""

    uri: str
    digest: str
    images: torch.Tensor
    labels: torch.Tensor


def read_json(store, key: str, what: str) -> dict[str, Any]:
    if not store.exists(key):
        raise InputError(f"{store.uri(key)}: missing; {what}")
    try:
        return json.loads(store.read_bytes(key))
    except ValueError as exc:
        raise InputError(f"{store.uri(key)}: not valid JSON ({exc})") from None


def load_trained(uri: str, storage: StorageConfig, device: torch.device) -> TrainedModel:
    """``weights.pt`` + ``model.json`` as the training step writes them, in eval mode."""
    store = open_store(uri, storage)
    meta = read_json(store, "model.json", "pass the MODEL_URI the training step wrote")
    if not store.exists("weights.pt"):
        raise InputError(f"{store.uri('weights.pt')}: missing; the training step writes it last")
    data = store.read_bytes("weights.pt")
    where = store.uri("weights.pt")
    try:
        state = require_state_dict(load_weights(data, where), where)
    except WeightsError as exc:
        raise InputError(str(exc)) from None
    try:
        model = build_model(
            meta["architecture"], int(meta["num_classes"]), int(meta.get("width", 64))
        )
        # A state dict saved from DDP or torch.compile carries a prefix: strip it.
        state = {k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in state.items()}
        model.load_state_dict(state)
    except (KeyError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(
            f"{uri}: weights.pt does not load into model.json's model ({first})"
        ) from None
    meta.setdefault("input_shape", list(INPUT_SHAPE))
    return TrainedModel(uri, model.to(device).eval(), meta, hashlib.sha256(data).hexdigest())


def load_test_split(uri: str, storage: StorageConfig) -> TestSplit:
    """The test arrays of a dataset staged by ``steps.stage_data``, sha256-verified."""
    store = open_store(uri, storage)
    manifest = read_manifest(store)
    images, labels = read_split(store, manifest, "test")
    pixels = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    return TestSplit(uri, manifest["digest"], pixels, torch.from_numpy(labels))


def load_calibration_images(uri: str, storage: StorageConfig, count: int) -> torch.Tensor:
    """``count`` training images (uint8 NCHW, CPU) spread evenly over the training split,
    for INT8 calibration: the test split stays held out for the gate."""
    store = open_store(uri, storage)
    images, _ = read_split(store, read_manifest(store), "train")
    picked = images[np.linspace(0, len(images) - 1, min(count, len(images))).astype(int)]
    return torch.from_numpy(picked).permute(0, 3, 1, 2).contiguous()


def normalize(images: torch.Tensor, mean, std) -> torch.Tensor:
    """uint8 NCHW -> float32 ``(x / 255 - mean) / std``, the trainer's exact arithmetic."""
    device = images.device
    std_t = torch.tensor(std, device=device).view(1, 3, 1, 1)
    mean_t = torch.tensor(mean, device=device).view(1, 3, 1, 1)
    return torch.addcmul(-mean_t / std_t, images.float(), 1.0 / (255.0 * std_t))


def run_batched(fn: Runner, x: torch.Tensor, max_batch: int, min_batch: int = 1) -> torch.Tensor:
    """Logits of ``x`` in chunks inside the dynamic range; a short tail is padded up."""
    outs = []
    with torch.inference_mode():
        for chunk in x.split(max_batch):
            n = len(chunk)
            if n < min_batch:
                chunk = torch.cat([chunk, chunk[:1].expand(min_batch - n, *chunk.shape[1:])])
            outs.append(fn(chunk)[:n].float())
    return torch.cat(outs)
