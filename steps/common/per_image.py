"""Which test images a variant classified correctly, packed into ``benchmark.json``
(``variants.<name>.correct``: base64 of the bits, first image first), so a later check on
the first N images only (``serving.check_samples``) compares its accuracy with the
benchmark's on those same N, not on the whole split."""

from __future__ import annotations

import base64

import numpy as np


def pack_correct(correct: np.ndarray) -> str:
    """A boolean per image, as base64 of ``numpy.packbits`` (10,000 images: 1.7 kB)."""
    return base64.b64encode(np.packbits(np.asarray(correct, dtype=bool))).decode()


def prefix_accuracy(packed: str, images: int, count: int) -> float:
    """The accuracy over the first ``count`` of the ``images`` packed by ``pack_correct``."""
    if not 0 < count <= images:
        raise ValueError(f"{count} images: the benchmark measured 1..{images}")
    bits = np.unpackbits(np.frombuffer(base64.b64decode(packed), dtype=np.uint8))
    if len(bits) < images:
        raise ValueError(f"{len(bits)} bits packed for {images} images")
    return float(bits[:count].mean())
