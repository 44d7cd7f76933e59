"""Argo's memoization, locally: a template's ``memoize.key`` names a file of its outputs
under the cache directory (one folder per ``cache.configMap``); a success is stored, and a
later run reuses it while it is younger than ``maxAge`` and while the local files its outputs
point to (a ``file://`` URI or a path that existed when it was stored) are still there. Argo
trusts its ConfigMap entry and would hand on the outputs of objects since deleted."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from flows.local.durations import parse_duration


def default_cache_dir() -> Path:
    """Where memoized outputs live: ``$CIFAR_CACHE_DIR/memo`` or ~/.cache/cifar-pipeline/memo."""
    base = os.environ.get("CIFAR_CACHE_DIR") or Path.home() / ".cache" / "cifar-pipeline"
    return Path(base) / "memo"


class MemoCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def entry(self, template: dict[str, Any]) -> Path | None:
        """The file a memoized template's outputs live in; None when it is not memoized."""
        memo = template.get("memoize")
        if not memo:
            return None
        config_map = memo.get("cache", {}).get("configMap", {}).get("name", "default")
        key = hashlib.sha256(memo["key"].encode()).hexdigest()
        return self.directory / config_map / f"{key}.json"

    def get(
        self, template: dict[str, Any], cwd: Path = Path()
    ) -> tuple[dict[str, str], Path] | None:
        """The stored outputs and their file, while younger than ``maxAge`` and what they
        point to exists; else None."""
        entry = self.entry(template)
        if entry is None or not entry.is_file():
            return None
        stored = json.loads(entry.read_text())
        max_age = template["memoize"].get("maxAge")
        if max_age and time.time() - stored["created"] > parse_duration(max_age):
            return None
        if not all((cwd / target).exists() for target in stored.get("targets", [])):
            return None  # e.g. the dataset's directory was removed: run the task again
        return stored["outputs"], entry

    def put(self, template: dict[str, Any], outputs: dict[str, str], cwd: Path = Path()) -> None:
        entry = self.entry(template)
        if entry is not None:
            targets = [str(t) for v in outputs.values() if (t := local_target(v, cwd))]
            entry.parent.mkdir(parents=True, exist_ok=True)
            record = {"outputs": outputs, "created": time.time(), "targets": targets}
            entry.write_text(json.dumps(record))


def local_target(value: str, cwd: Path) -> Path | None:
    """The local file or directory an output value names, if it names one that exists."""
    if value.startswith("file://"):
        path = Path(unquote(urlparse(value).path))
    elif "/" in value and "\n" not in value and len(value) < 4096 and "://" not in value:
        path = Path(value)
    else:
        return None
    try:
        return path if (cwd / path).exists() else None
    except OSError:
        return None
