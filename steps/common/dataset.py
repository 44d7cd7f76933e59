"""The staged dataset's format, for its writer (staging) and its readers (training, the
trained model's test split). Plain numpy, no torch: the data image stays small.

    ROOT/datasets/<name>/<sha256>/train_images.npy   uint8  N x 32 x 32 x 3 (RGB)
                                  train_labels.npy   int64  N
                                  test_images.npy    uint8  M x 32 x 32 x 3
                                  test_labels.npy    int64  M
                                  manifest.json      written last: files and their sha256

The digest is the sha256 of the sorted lines ``<file> <sha256>`` of the manifest's files,
so it is derivable from the manifest alone. A reader that finds the manifest finds the
whole dataset; every array it reads is checked against the manifest's sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from steps.common.storage import Store

MANIFEST = "manifest.json"
SPLITS = ("train", "test")
SIDE = 32
NUM_CLASSES = 10


class NotADataset(ValueError):
    """The URI holds no manifest.json: not what steps.stage_data printed (a user error)."""


class DatasetError(RuntimeError):
    """A staged dataset is incomplete or damaged: a file differs from its manifest."""


def write_arrays(arrays: dict[str, np.ndarray], directory: Path) -> dict[str, dict[str, Any]]:
    """Each array as ``<name>.npy`` in ``directory``; the manifest's ``files`` entries."""
    files = {}
    for name, array in arrays.items():
        path = directory / f"{name}.npy"
        np.save(path, array, allow_pickle=False)
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(8 << 20):
                digest.update(chunk)
        files[f"{name}.npy"] = {
            "sha256": digest.hexdigest(),
            "bytes": path.stat().st_size,
            "shape": list(array.shape),
            "dtype": str(array.dtype),
        }
    return files


def content_digest(files: dict[str, dict[str, Any]]) -> str:
    """sha256 over the sorted ``name sha256`` lines: derivable from the manifest alone."""
    lines = "".join(f"{name} {files[name]['sha256']}\n" for name in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def read_manifest(store: Store) -> dict[str, Any]:
    """The dataset's manifest; NotADataset where there is none, DatasetError if malformed."""
    if not store.exists(MANIFEST):
        raise NotADataset(
            f"{store.root}: no {MANIFEST}, so not a staged dataset; pass the URI that "
            "steps.stage_data printed (ROOT/datasets/<name>/<sha256>)"
        )
    try:
        manifest = json.loads(store.read_bytes(MANIFEST))
        manifest["files"], manifest["digest"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{store.uri(MANIFEST)}: malformed manifest ({exc})") from None
    return manifest


def read_split(store: Store, manifest: dict[str, Any], split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split's images (uint8 ``N x 32 x 32 x 3``) and labels (int64 ``N``), each file
    checked against the manifest's sha256, shape and label range."""
    images = _read_array(store, manifest, f"{split}_images.npy")
    labels = _read_array(store, manifest, f"{split}_labels.npy")
    if images.dtype != np.uint8 or images.shape[1:] != (SIDE, SIDE, 3):
        raise DatasetError(
            f"{store.root}: {split}_images is {images.dtype} {images.shape}, "
            "expected uint8 N x 32 x 32 x 3"
        )
    in_range = labels.min(initial=0) >= 0 and labels.max(initial=0) < NUM_CLASSES
    if labels.shape != (len(images),) or not in_range:
        raise DatasetError(f"{store.root}: {split}_labels do not match the images or 0..9")
    return images, labels.astype(np.int64)


def _read_array(store: Store, manifest: dict[str, Any], key: str) -> np.ndarray:
    info = manifest["files"].get(key)
    if info is None:
        raise DatasetError(f"{store.root}: {MANIFEST} does not list {key}")
    data = store.read_bytes(key)
    if hashlib.sha256(data).hexdigest() != info.get("sha256"):
        raise DatasetError(f"{store.uri(key)}: sha256 differs from the manifest's; corrupt")
    return np.load(io.BytesIO(data), allow_pickle=False)
