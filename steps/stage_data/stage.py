"""Staging itself: a source's arrays into the artifact store, content-addressed, manifest last.

resolve the source -> arrays -> .npy files and their sha256 -> upload to
``ROOT/datasets/<name>/<sha256>/`` with ``manifest.json`` written last (the format:
``steps.common.dataset``).

A reader that finds the manifest finds the whole dataset. Staging the same content again
finds the manifest and does nothing; a small index ``datasets/<name>/sources/<key>.json``
(key: the tarball's md5 or the synthetic parameters) lets a re-run skip even the download.
This module never imports torch: the data image stays small.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from rich.console import Console

from steps.common.config import ConfigError, PipelineConfig
from steps.common.config.fields import check_data_source
from steps.common.dataset import MANIFEST, content_digest, write_arrays
from steps.common.progress import transfer
from steps.common.storage import open_store, split_uri
from steps.stage_data.cifar import (
    SYNTHETIC_GENERATOR,
    DataError,
    Splits,
    download,
    md5sum,
    parse_tarball,
    synthetic_splits,
    verify_md5,
)

DEFAULT_SYNTHETIC_SIZE = 50_000
CACHE_ENV = "CIFAR_CACHE_DIR"


@dataclass(frozen=True)
class Source:
    """What ``--source`` names: the official download, a tarball copy, or synthetic data."""

    kind: str  # cifar10 | tarball | synthetic
    spec: str
    location: str = ""
    size: int = 0

    @property
    def dataset_name(self) -> str:
        return "synthetic" if self.kind == "synthetic" else "cifar10"


@dataclass
class StageResult:
    dataset_uri: str
    digest: str
    name: str
    num_train: int
    num_test: int
    already_staged: bool
    uploaded_bytes: int = 0
    upload_seconds: float = 0.0
    seconds: float = 0.0
    startup_seconds: float | None = None  # process start to the step's own code
    class_counts: dict[str, list[int]] = field(default_factory=dict)


def parse_source(text: str) -> Source:
    """``cifar10``, ``synthetic`` / ``synthetic:N``, or a path / file:// / s3:// tarball
    (checked as the config's ``data.source`` is)."""
    try:
        check_data_source(text)
    except ValueError as exc:
        reason = str(exc).removeprefix(f"{text!r}: ").removeprefix(f"{text}: ")
        raise ConfigError(f"--source {text}: {reason}") from None
    if text == "cifar10":
        return Source("cifar10", text)
    if text.startswith("synthetic"):
        size = int(text.partition(":")[2] or DEFAULT_SYNTHETIC_SIZE)
        return Source("synthetic", text, size=size)
    return Source("tarball", text, location=text)


def _cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cifar-pipeline"
    return Path(os.environ.get(CACHE_ENV, default))


def _fetch_tarball(source: Source, cfg: PipelineConfig, tmp: Path, console: Console) -> Path:
    """A local, md5-verified copy of the tarball a source names."""
    md5 = cfg.data.md5
    if source.kind == "cifar10":
        cached = _cache_dir() / "cifar-10-python.tar.gz"
        if cached.is_file() and md5 != "none" and md5sum(cached) == md5:
            console.print(f"Using the cached download {cached}")
            return cached
        cached.parent.mkdir(parents=True, exist_ok=True)

        with ExitStack() as stack:

            def start(total: int | None) -> Callable[[int], None]:  # a line per attempt
                return stack.enter_context(transfer(console, f"Downloading {cfg.data.url}", total))

            download(
                cfg.data.url,
                cached,
                retries=cfg.data.download_retries,
                timeout_s=cfg.data.download_timeout_s,
                on_start=start,
            )
        try:
            verify_md5(cached, md5, cfg.data.url)
        except DataError:
            cached.unlink(missing_ok=True)
            raise
        return cached
    if source.location.startswith("s3://"):
        store, key = split_uri(source.location, cfg.storage)
        local = tmp / "cifar-10-python.tar.gz"
        total = store.size(key)
        with transfer(console, f"Downloading {source.location}", total) as advance:
            store.download_file(key, local, advance)
    else:
        local = Path(source.location.removeprefix("file://"))
        if not local.is_file():
            raise DataError(f"{source.location}: no such file")
    verify_md5(local, md5, source.location)
    return local


def _source_key(source: Source, cfg: PipelineConfig) -> str | None:
    """A key for the source index, known before any download; None when there is none."""
    if source.kind == "synthetic":
        text = f"{SYNTHETIC_GENERATOR}:{source.size}:{cfg.data.synthetic_seed}"
        return "synthetic-" + hashlib.sha256(text.encode()).hexdigest()[:32]
    if cfg.data.md5 != "none":
        return f"md5-{cfg.data.md5}"
    return None


def _class_counts(splits: Splits) -> dict[str, list[int]]:
    return {
        "train": np.bincount(splits.train_labels, minlength=10).tolist(),
        "test": np.bincount(splits.test_labels, minlength=10).tolist(),
    }


def _result_from_manifest(store, prefix: str, manifest: dict, start: float) -> StageResult:
    return StageResult(
        dataset_uri=store.uri(prefix),
        digest=manifest["digest"],
        name=manifest["name"],
        num_train=manifest["counts"]["train"],
        num_test=manifest["counts"]["test"],
        already_staged=True,
        seconds=time.perf_counter() - start,
        class_counts=manifest["class_counts"],
    )


def stage_dataset(
    source: Source, dest: str, cfg: PipelineConfig, console: Console | None = None
) -> StageResult:
    """Put the source's arrays under ``dest/datasets/<name>/<digest>/``, manifest last."""
    console = console or Console(stderr=True, soft_wrap=True)
    start = time.perf_counter()
    store = open_store(dest, cfg.storage)
    base = f"datasets/{source.dataset_name}"
    key = _source_key(source, cfg)
    index_key = f"{base}/sources/{key}.json" if key else None
    if index_key and store.exists(index_key):
        digest = json.loads(store.read_bytes(index_key))["digest"]
        if store.exists(f"{base}/{digest}/{MANIFEST}"):
            manifest = json.loads(store.read_bytes(f"{base}/{digest}/{MANIFEST}"))
            console.print(f"Already staged: {store.uri(f'{base}/{digest}')} (nothing to do)")
            return _result_from_manifest(store, f"{base}/{digest}", manifest, start)

    with tempfile.TemporaryDirectory(prefix="stage-") as tmp_name:
        tmp = Path(tmp_name)
        source_md5 = None
        if source.kind == "synthetic":
            console.print(f"Generating {source.size:,} synthetic training images")
            splits = synthetic_splits(source.size, cfg.data.synthetic_seed)
        else:
            tarball = _fetch_tarball(source, cfg, tmp, console)
            source_md5 = md5sum(tarball) if cfg.data.md5 == "none" else cfg.data.md5
            index_key = index_key or f"{base}/sources/md5-{source_md5}.json"
            splits = parse_tarball(tarball, source.spec)
        files = write_arrays(splits.arrays(), tmp)
        digest = content_digest(files)
        prefix = f"{base}/{digest}"
        if store.exists(f"{prefix}/{MANIFEST}"):
            console.print(f"Already staged: {store.uri(prefix)} (same content; nothing to do)")
            manifest = json.loads(store.read_bytes(f"{prefix}/{MANIFEST}"))
            store.write_bytes(index_key, json.dumps({"digest": digest}).encode())
            return _result_from_manifest(store, prefix, manifest, start)

        total = sum(info["bytes"] for info in files.values())
        upload_start = time.perf_counter()
        with transfer(console, f"Uploading to {store.uri(prefix)}", total) as advance:
            for name in files:
                store.upload_file(tmp / name, f"{prefix}/{name}", advance)
        upload_seconds = time.perf_counter() - upload_start

    manifest = {
        "name": source.dataset_name,
        "digest": digest,
        "digest_method": "sha256 of the sorted lines '<file> <sha256>\\n' of files",
        "format": "npy",
        "layout": {"images": "uint8 N x 32 x 32 x 3 (RGB)", "labels": "int64 N"},
        "classes": list(splits.classes),
        "counts": {"train": len(splits.train_labels), "test": len(splits.test_labels)},
        "class_counts": _class_counts(splits),
        "files": files,
        "source": source.spec,
        "source_md5": source_md5,
        "generator": SYNTHETIC_GENERATOR if source.kind == "synthetic" else None,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    # The manifest publishes the dataset: written only after every array is in place.
    store.write_bytes(f"{prefix}/{MANIFEST}", json.dumps(manifest, indent=2).encode())
    store.write_bytes(index_key, json.dumps({"digest": digest, "source": source.spec}).encode())
    result = _result_from_manifest(store, prefix, manifest, start)
    result.already_staged = False
    result.uploaded_bytes, result.upload_seconds = total, upload_seconds
    result.seconds = time.perf_counter() - start
    return result
