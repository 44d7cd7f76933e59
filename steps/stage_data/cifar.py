"""CIFAR-10 sources as arrays: the official python tarball (download, verify, parse) and
a deterministic synthetic stand-in. Plain numpy, no torch: the data image stays small.

Arrays follow one layout everywhere: images uint8 ``N x 32 x 32 x 3`` (HWC, RGB), labels
int64 ``N``.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import socket
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
TAR_DIR = "cifar-10-batches-py"
TRAIN_MEMBERS = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_MEMBER = "test_batch"
META_MEMBER = "batches.meta"
SYNTHETIC_GENERATOR = "synthetic-v1"


# In the config's terms, not as a command: this line is printed in a pod as well as here.
OFFLINE_HINT = (
    "stage synthetic data instead (data.source=synthetic, as configs/smoke.yaml does) or a copy "
    "of the tarball (data.source=/path/to/cifar-10-python.tar.gz; for this step alone: "
    "--source synthetic[:N] or --source PATH)"
)


class DataError(RuntimeError):
    """A source could not be fetched or is not valid CIFAR-10 data; the message says why."""


class SourceUnreachable(DataError):
    """The source's host does not resolve or refuses the connection: no network from here,
    which waiting does not change. A user error (exit 2): the config must name another
    source, so neither the download nor the workflow retries it."""


@dataclass(frozen=True)
class Splits:
    """The four arrays of a staged dataset, plus its class names."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    classes: tuple[str, ...]

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "train_images": self.train_images,
            "train_labels": self.train_labels,
            "test_images": self.test_images,
            "test_labels": self.test_labels,
        }


def md5sum(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify_md5(path: Path, expected: str, what: str) -> None:
    if expected == "none":
        return
    actual = md5sum(path)
    if actual != expected:
        raise DataError(
            f"{what}: md5 {actual} does not match the expected {expected}; the file is "
            "corrupt, truncated or not the official CIFAR-10 tarball (delete it and retry, "
            "or pass --md5 with its checksum)"
        )


def download(
    url: str,
    dest: Path,
    *,
    retries: int,
    timeout_s: float,
    on_start: Callable[[int | None], Callable[[int], None]] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Fetch ``url`` to ``dest`` (via a temporary name), retrying with exponential backoff;
    a host that does not resolve or refuses the connection is ``SourceUnreachable`` at once."""
    partial = dest.with_name(dest.name + ".part")
    last_error = ""
    attempt = 0
    for attempt in range(retries + 1):
        if attempt:
            sleep(min(2.0**attempt, 30.0))
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                length = response.headers.get("Content-Length")
                advance = on_start(int(length) if length else None) if on_start else None
                with open(partial, "wb") as out:
                    while chunk := response.read(1 << 20):
                        out.write(chunk)
                        if advance:
                            advance(len(chunk))
            partial.replace(dest)
            return
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", None) or exc
            last_error = str(reason).splitlines()[0] if str(reason) else type(exc).__name__
            partial.unlink(missing_ok=True)
            unreachable = unreachable_reason(reason)
            if unreachable:  # offline or nothing there: waiting will not change that
                host = urllib.parse.urlsplit(url).hostname
                raise SourceUnreachable(
                    f"cannot download {url}: {host} {unreachable} ({last_error}); no network? "
                    f"{OFFLINE_HINT}"
                ) from None
    tries = f"{attempt + 1} attempts" if attempt else "1 attempt"
    raise DataError(f"cannot download {url} after {tries} ({last_error}); {OFFLINE_HINT}")


def unreachable_reason(reason: object) -> str | None:
    """What a failed connection says of the host when no retry can succeed, else None."""
    if isinstance(reason, socket.gaierror):
        return "does not resolve"
    if isinstance(reason, ConnectionRefusedError):
        return "refused the connection"
    return None


class _ArrayUnpickler(pickle.Unpickler):
    """The CIFAR batches are pickles: allow numpy arrays and nothing that runs code."""

    ALLOWED: ClassVar[set[tuple[str, str]]] = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # bytes in protocol-2 pickles written by Python 3
        ("copy_reg", "_reconstructor"),
        ("copyreg", "_reconstructor"),
        ("__builtin__", "object"),
        ("builtins", "object"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"forbidden global {module}.{name}")


def _load_member(tar: tarfile.TarFile, name: str, what: str) -> dict:
    member_name = f"{TAR_DIR}/{name}"
    try:
        handle = tar.extractfile(member_name)
    except KeyError:
        raise DataError(f"{what}: missing member {member_name}") from None
    if handle is None:
        raise DataError(f"{what}: {member_name} is not a regular file")
    try:
        payload = _ArrayUnpickler(io.BytesIO(handle.read()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise DataError(f"{what}: {member_name} is not a CIFAR batch ({exc})") from None
    if not isinstance(payload, dict):
        raise DataError(f"{what}: {member_name} is not a CIFAR batch (not a dict)")
    return payload


def _batch_arrays(batch: dict, member: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    if b"data" not in batch or b"labels" not in batch:
        raise DataError(f"{what}: {TAR_DIR}/{member} lacks b'data' or b'labels'")
    data = np.asarray(batch[b"data"])
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(
            f"{what}: {TAR_DIR}/{member} data is {data.dtype} {data.shape}, expected uint8 N x 3072"
        )
    if labels.shape != (data.shape[0],) or labels.min(initial=0) < 0 or labels.max(initial=0) > 9:
        raise DataError(f"{what}: {TAR_DIR}/{member} labels do not match its images or 0..9")
    # Rows are channel-major (1024 R, 1024 G, 1024 B); the staged layout is N x H x W x C.
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def parse_tarball(path: Path, what: str | None = None) -> Splits:
    """Arrays from ``cifar-10-python.tar.gz``: data_batch_1..5, test_batch, batches.meta."""
    what = what or str(path)
    try:
        with tarfile.open(path, "r:gz") as tar:
            meta = _load_member(tar, META_MEMBER, what)
            train = [_batch_arrays(_load_member(tar, m, what), m, what) for m in TRAIN_MEMBERS]
            test_images, test_labels = _batch_arrays(
                _load_member(tar, TEST_MEMBER, what), TEST_MEMBER, what
            )
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DataError(f"{what}: truncated or not a gzip tarball ({exc})") from None
    names = tuple(n.decode() for n in meta.get(b"label_names", ()))
    if len(names) != 10:
        raise DataError(f"{what}: {TAR_DIR}/{META_MEMBER} must name 10 classes, has {len(names)}")
    return Splits(
        train_images=np.concatenate([images for images, _ in train]),
        train_labels=np.concatenate([labels for _, labels in train]),
        test_images=test_images,
        test_labels=test_labels,
        classes=names,
    )


# --- synthetic source ------------------------------------------------------------------
# A class is a hue and a stripe orientation; each image adds a random brightness, stripe
# phase and pixel noise. Colour alone gets a small CNN well above chance in one epoch,
# the stripes reward a network that looks at shape.
_HUES = np.array(
    [
        [220, 60, 60],
        [60, 200, 60],
        [60, 80, 220],
        [220, 200, 50],
        [200, 60, 200],
        [50, 200, 210],
        [240, 140, 40],
        [130, 130, 130],
        [140, 80, 40],
        [240, 240, 240],
    ],
    dtype=np.float32,
)


def _synthetic_split(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.permutation(np.arange(n) % 10).astype(np.int64)
    images = np.empty((n, 32, 32, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    for start in range(0, n, 4096):  # bounded memory for CIFAR-sized sets
        lab = labels[start : start + 4096]
        m = len(lab)
        angle = lab.astype(np.float32) * (np.pi / 10)
        phase = rng.uniform(0, 2 * np.pi, m).astype(np.float32)
        wave = np.sin(
            (np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy) * 0.8
            + phase[:, None, None]
        )
        brightness = rng.uniform(0.6, 1.0, m).astype(np.float32)[:, None, None, None]
        base = _HUES[lab][:, None, None, :] * brightness
        noise = rng.normal(0, 24, (m, 32, 32, 3)).astype(np.float32)
        pixels = base * (0.75 + 0.25 * wave[..., None]) + noise
        images[start : start + m] = np.clip(pixels, 0, 255).astype(np.uint8)
    return images, labels


def synthetic_splits(n_train: int, seed: int) -> Splits:
    """A deterministic, learnable CIFAR-shaped dataset: n_train images, n_train // 5 test."""
    rng = np.random.default_rng(seed)
    train_images, train_labels = _synthetic_split(n_train, rng)
    test_images, test_labels = _synthetic_split(max(n_train // 5, 10), rng)
    return Splits(train_images, train_labels, test_images, test_labels, CIFAR10_CLASSES)
