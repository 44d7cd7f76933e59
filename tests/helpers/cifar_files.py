"""Small tarballs in the exact CIFAR-10 python format, written by the tests themselves.

The layout is the official one: ``cifar-10-batches-py/`` holding ``data_batch_1..5`` and
``test_batch`` (pickled dicts with ``b'data'`` uint8 N x 3072, channel-major rows, and
``b'labels'`` a list of ints) and ``batches.meta`` (``b'label_names'``).
"""

from __future__ import annotations

import io
import pickle
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CLASSES = [
    b"airplane",
    b"automobile",
    b"bird",
    b"cat",
    b"deer",
    b"dog",
    b"frog",
    b"horse",
    b"ship",
    b"truck",
]
MEMBERS = [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]


@dataclass
class Expected:
    """What staging must produce from the tarball, in the staged (N, 32, 32, 3) layout."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def _add(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))


def write_cifar_tarball(
    path: Path, per_batch: int = 20, seed: int = 0, omit: str | None = None
) -> Expected:
    """Write a CIFAR-format tarball with ``per_batch`` images per batch file."""
    rng = np.random.default_rng(seed)
    batches = {}
    for member in MEMBERS:
        rows = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, 10, per_batch)]
        batches[member] = (rows, labels)
    with tarfile.open(path, "w:gz") as tar:
        for member, (rows, labels) in batches.items():
            if member == omit:
                continue
            batch = {
                b"batch_label": member.encode(),
                b"labels": labels,
                b"data": rows,
                b"filenames": [f"{member}_{i}.png".encode() for i in range(len(labels))],
            }
            _add(tar, member, pickle.dumps(batch, protocol=2))
        if omit != "batches.meta":
            meta = {b"label_names": CLASSES, b"num_cases_per_batch": per_batch, b"num_vis": 3072}
            _add(tar, "batches.meta", pickle.dumps(meta, protocol=2))

    def hwc(rows: np.ndarray) -> np.ndarray:
        # Official rows: 1024 red, 1024 green, 1024 blue values, each row-major 32 x 32.
        return rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)

    train = [batches[m] for m in MEMBERS[:5]]
    return Expected(
        train_images=np.concatenate([hwc(rows) for rows, _ in train]),
        train_labels=np.array([label for _, labels in train for label in labels], np.int64),
        test_images=hwc(batches["test_batch"][0]),
        test_labels=np.array(batches["test_batch"][1], np.int64),
    )
