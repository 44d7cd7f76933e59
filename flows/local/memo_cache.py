"""Argo's memoization, locally: a template's ``memoize.key`` names a file of its outputs
under the cache directory (one folder per ``cache.configMap``); a success is stored with
the workflow that ran it, and a later run reuses it while it is younger than ``maxAge``
(Go's durations: ``0s`` takes no entry, so the run's success overwrites it, as Argo's
``Save`` does) and while the local files its outputs point to (a ``file://`` URI or a path
that existed when it was stored) are still there. Argo trusts its ConfigMap entry and
would hand on the outputs of objects since deleted: the pipeline's own check of a hit
(flows/pipeline/reuse_templates.py) covers that, here and on a cluster.

What the command line adds (no Argo counterpart): ``no_cache`` takes no entry at all and
``refresh`` none for the named tasks; both still store what they run.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from flows.local.conditions.depends import dependency_names
from flows.local.durations import parse_duration


def default_cache_dir() -> Path:
    """Where memoized outputs live: ``$CIFAR_CACHE_DIR/memo`` or ~/.cache/cifar-pipeline/memo."""
    base = os.environ.get("CIFAR_CACHE_DIR") or Path.home() / ".cache" / "cifar-pipeline"
    return Path(base) / "memo"


@dataclass(frozen=True)
class Hit:
    """A memo entry found: its outputs, the workflow that stored it, its file; ``gone``: what
    it points to that no longer exists (then it is not taken)."""

    outputs: dict[str, str]
    workflow: str
    entry: Path
    gone: str = ""


class MemoCache:
    def __init__(
        self, directory: Path, *, no_cache: bool = False, refresh: Collection[str] = ()
    ) -> None:
        self.directory = directory
        self.no_cache = no_cache
        self.refresh = frozenset(refresh)  # task names whose entries are not taken

    def entry(self, template: dict[str, Any]) -> Path | None:
        """The file a memoized template's outputs live in; None when it is not memoized."""
        memo = template.get("memoize")
        if not memo:
            return None
        config_map = memo.get("cache", {}).get("configMap", {}).get("name", "default")
        key = hashlib.sha256(memo["key"].encode()).hexdigest()
        return self.directory / config_map / f"{key}.json"

    def get(self, template: dict[str, Any], cwd: Path = Path(), task: str = "") -> Hit | None:
        """The stored outputs, while younger than ``maxAge``, unless ``task`` is refreshed
        (or nothing is cached); else None. A hit whose local files are gone says so."""
        entry = self.entry(template)
        if entry is None or not entry.is_file() or self.no_cache or task in self.refresh:
            return None
        stored = json.loads(entry.read_text())
        max_age = template["memoize"].get("maxAge")
        if max_age and time.time() - stored["created"] >= parse_duration(max_age):
            return None
        hit = Hit(stored["outputs"], stored.get("workflow", ""), entry)
        for target in stored.get("targets", []):
            if not (cwd / target).exists():  # e.g. the dataset's directory was removed
                return replace(hit, gone=f"{target} no longer exists")
        return hit

    def put(
        self,
        template: dict[str, Any],
        outputs: dict[str, str],
        cwd: Path = Path(),
        workflow: str = "",
    ) -> None:
        entry = self.entry(template)
        if entry is not None:
            targets = [str(t) for v in outputs.values() if (t := local_target(v, cwd))]
            entry.parent.mkdir(parents=True, exist_ok=True)
            record = {
                "key": template["memoize"]["key"],
                "workflow": workflow,
                "outputs": outputs,
                "created": time.time(),
                "targets": targets,
            }
            partial = entry.with_suffix(".tmp")
            partial.write_text(json.dumps(record))
            partial.replace(entry)  # never a half-written entry where a run looks


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


def with_dependents(tasks: list[dict[str, Any]], names: Collection[str]) -> set[str]:
    """``names`` and every task of a DAG that depends on one of them, however far down."""
    found = set(names)
    grew = True
    while grew:
        grew = False
        for task in tasks:
            if task["name"] not in found and found & set(dependency_names(task)):
                found.add(task["name"])
                grew = True
    return found
