"""A directory as a store: writes go to a temporary sibling and are renamed into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from steps.common.storage.base import MB, ProgressCallback, StorageError


@dataclass
class LocalStore:
    """A directory. Writes go to a temporary sibling and are renamed into place."""

    directory: Path

    def __post_init__(self) -> None:
        self.directory = Path(os.path.abspath(self.directory))
        self.root = self.directory.as_uri()

    def _path(self, key: str) -> Path:
        return self.directory / key if key else self.directory

    def uri(self, key: str) -> str:
        return self._path(key).as_uri()

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except OSError as exc:
            raise StorageError(f"{self.uri(key)}: {exc.strerror}") from None

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except OSError as exc:
            raise StorageError(f"{self.uri(key)}: cannot read ({exc.strerror})") from None

    def _atomic_write(self, key: str, fill: Callable[[Path], None]) -> None:
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            os.close(fd)
        except OSError as exc:
            raise StorageError(f"{self.uri(key)}: cannot write ({exc.strerror})") from None
        try:
            fill(Path(tmp))
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; a published file is for every reader
            os.replace(tmp, target)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise StorageError(f"{self.uri(key)}: cannot write ({exc.strerror})") from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def write_bytes(self, key: str, data: bytes) -> None:
        self._atomic_write(key, lambda tmp: tmp.write_bytes(data))

    def upload_file(self, path: Path, key: str, progress: ProgressCallback | None = None) -> None:
        def copy(tmp: Path) -> None:
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(8 * MB):
                    dst.write(chunk)
                    if progress:
                        progress(len(chunk))

        self._atomic_write(key, copy)

    def download_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None:
        source = self._path(key)
        if not source.is_file():
            raise StorageError(f"{self.uri(key)}: no such file")
        shutil.copyfile(source, path)
        if progress:
            progress(source.stat().st_size)

    def list(self, prefix: str = "") -> list[str]:
        base = self._path(prefix)
        if base.is_file():
            return [prefix]
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.directory).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.name.endswith(".tmp")
        )

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)
