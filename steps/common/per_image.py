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
    return float(_prefix(packed, images, count).mean())


def mixed_accuracy_bounds(packed: list[str], images: int, count: int) -> tuple[float, float]:
    """The lowest and highest accuracy over the first ``count`` images when each image may
    be answered by any of the variants whose results are ``packed``: the share that every
    one of them got right, and the share that at least one did. (A server that dispatches
    by batch size answers the same image with whichever variant its batch picked; two
    variants of equal accuracy that err on different images serve anything between.)"""
    bits = np.stack([_prefix(one, images, count) for one in packed]).astype(bool)
    return float(bits.all(axis=0).mean()), float(bits.any(axis=0).mean())


def _prefix(packed: str, images: int, count: int) -> np.ndarray:
    if not 0 < count <= images:
        raise ValueError(f"{count} images: the benchmark measured 1..{images}")
    bits = np.unpackbits(np.frombuffer(base64.b64decode(packed), dtype=np.uint8))
    if len(bits) < images:
        raise ValueError(f"{len(bits)} bits packed for {images} images")
    return bits[:count]
