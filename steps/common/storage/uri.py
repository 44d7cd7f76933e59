"""Which store a URI names: ``s3://bucket/prefix``, ``file:///dir`` or a plain path."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from steps.common.config import StorageConfig
from steps.common.config.fields import check_uri
from steps.common.storage.base import Store
from steps.common.storage.local import LocalStore
from steps.common.storage.s3 import S3Store


def open_store(uri: str, cfg: StorageConfig | None = None) -> Store:
    """The store for a root URI: ``s3://bucket/prefix``, ``file:///dir`` or a plain path."""
    cfg = cfg or StorageConfig()
    parsed = urlparse(check_uri(uri))
    if parsed.scheme == "s3":
        return S3Store(parsed.netloc, parsed.path.strip("/"), cfg)
    if parsed.scheme == "file":
        return LocalStore(Path(parsed.netloc + parsed.path) if parsed.netloc else Path(parsed.path))
    return LocalStore(Path(uri))


def split_uri(uri: str, cfg: StorageConfig | None = None) -> tuple[Store, str]:
    """The store holding one object URI, and the object's key in it."""
    parsed = urlparse(check_uri(uri))
    if parsed.scheme == "s3":
        bucket_root = f"s3://{parsed.netloc}"
        return open_store(bucket_root, cfg), parsed.path.lstrip("/")
    path = Path(parsed.netloc + parsed.path) if parsed.scheme == "file" else Path(uri)
    return LocalStore(path.parent), path.name
