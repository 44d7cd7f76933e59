"""Which URIs name a place the pipeline can read and write: a plain path, ``file://...`` or
``s3://bucket[/prefix]``. Checked where a URI enters (the config, a step's command line),
so a typo fails before anything runs, as a user error."""

from __future__ import annotations

import re
from urllib.parse import urlparse

# S3's bucket naming rules: 3-63 characters, lowercase letters, digits, '.' and '-'.
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class UriError(ValueError):
    """A URI that names no place the pipeline can use; the message says why and what works."""


def check_uri(uri: str) -> str:
    """``uri`` if it is a plain path, ``file://...`` or ``s3://bucket[/prefix]``; else
    UriError naming what is wrong."""
    if not uri:
        raise UriError("empty URI: use a path, file:// or s3://bucket/prefix")
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise UriError(f"{uri}: an s3:// URI needs a bucket name (s3://bucket/prefix)")
        if not BUCKET.fullmatch(parsed.netloc):
            raise UriError(
                f"{uri}: {parsed.netloc!r} is not an S3 bucket name (3-63 characters: "
                "a-z, 0-9, '.', '-')"
            )
    elif parsed.scheme not in ("", "file"):
        raise UriError(
            f"{uri}: unsupported scheme {parsed.scheme!r}; use a path, file:// or s3://bucket/prefix"
        )
    return uri
