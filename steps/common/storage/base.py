"""What every store shares: the interface, its error, and how keys join a root URI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

MB = 1024 * 1024
ProgressCallback = Callable[[int], None]


class StorageError(RuntimeError):
    """An object store could not be read or written; the message says which and why."""


class Store(Protocol):
    """Objects under one root URI, addressed by '/'-separated keys."""

    root: str

    def uri(self, key: str) -> str: ...
    def exists(self, key: str) -> bool: ...
    def read_bytes(self, key: str) -> bytes: ...
    def write_bytes(self, key: str, data: bytes) -> None: ...
    def upload_file(
        self, path: Path, key: str, progress: ProgressCallback | None = None
    ) -> None: ...
    def download_file(
        self, key: str, path: Path, progress: ProgressCallback | None = None
    ) -> None: ...
    def size(self, key: str) -> int: ...
    def list(self, prefix: str = "") -> list[str]: ...
    def delete(self, key: str) -> None: ...


def join_uri(root: str, *keys: str) -> str:
    parts = [root.rstrip("/"), *(k.strip("/") for k in keys if k)]
    return "/".join(parts)
