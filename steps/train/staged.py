"""The staged dataset read onto the training device: every file verified against the
manifest ``steps.stage_data`` wrote last."""

from __future__ import annotations

import torch

from steps.common.config import StorageConfig
from steps.common.dataset import SPLITS, read_manifest, read_split
from steps.common.storage import open_store
from steps.train.data import Dataset


def load_dataset(uri: str, storage: StorageConfig, device: torch.device) -> Dataset:
    """Read a dataset staged by ``steps.stage_data`` (verifying every file) onto ``device``."""
    store = open_store(uri, storage)
    manifest = read_manifest(store)
    tensors: dict[str, torch.Tensor] = {}
    for split in SPLITS:
        images, labels = read_split(store, manifest, split)
        tensors[f"{split}_images"] = torch.from_numpy(images).to(device)
        tensors[f"{split}_labels"] = torch.from_numpy(labels).to(device)
    return Dataset(
        uri=uri,
        name=manifest.get("name", "dataset"),
        digest=manifest["digest"],
        classes=list(manifest.get("classes", [str(i) for i in range(10)])),
        **tensors,
    )
