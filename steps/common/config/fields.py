"""Field types the config sections share: each check written once, named by what it holds.

A check failing raises ``ValueError``; pydantic reports it under the field's name, and
``load_config`` adds where the value came from. ``check_uri`` is also where a step's
command line checks a URI: a typo fails before anything runs, as a user error.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors, and so is a bad value set later."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _matching(pattern: str, message: str):
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(message.format(value=value))
        return value

    return AfterValidator(check)


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


StorageUri = Annotated[str, AfterValidator(check_uri)]
SYNTHETIC = re.compile(r"synthetic(:(\d+))?")


def check_data_source(value: str) -> str:
    """``cifar10``, ``synthetic[:N]`` (N >= 10) or a path / file:// / s3:// tarball."""
    if value == "cifar10":
        return value
    match = SYNTHETIC.fullmatch(value)
    if match:
        if match.group(2) and int(match.group(2)) < 10:
            raise ValueError(f"{value!r}: synthetic needs at least 10 images")
        return value
    if value.startswith("synthetic"):
        raise ValueError(f"{value!r}: expected synthetic or synthetic:N (N images)")
    try:
        return check_uri(value)
    except UriError as exc:
        raise ValueError(
            f"{str(exc).split(';')[0]}; expected cifar10, synthetic[:N], or a path, file:// "
            "or s3:// URI of cifar-10-python.tar.gz"
        ) from None


DataSource = Annotated[str, AfterValidator(check_data_source)]


def _processes(value: object) -> object:
    """A number of processes of at least 1, or ``auto``."""
    if value == "auto":
        return value
    try:
        count = int(str(value))
    except ValueError:
        raise ValueError(f"{value!r} is not a number of processes or 'auto'") from None
    if count < 1:
        raise ValueError(f"{count} processes: use 1 or more, or 'auto'")
    return count


Processes = Annotated[int | Literal["auto"], BeforeValidator(_processes)]

Md5 = Annotated[
    str, _matching(r"[0-9a-f]{32}|none", "{value!r} is not 32 lowercase hex digits or 'none'")
]
KubeName = Annotated[
    str,
    _matching(
        r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?",
        "{value!r} is not a Kubernetes name (a-z, 0-9, '-', max 63)",
    ),
]
Quantity = Annotated[
    str,
    _matching(
        r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?",
        "{value!r} is not a Kubernetes quantity, e.g. 2, 500m, 8Gi",
    ),
]
Duration = Annotated[
    str, _matching(r"[0-9]+(s|m|h)", "{value!r} is not a duration: a whole number of s, m or h")
]
# Argo names each cron run <name>-<10-digit time>, which must stay a 63-character name.
CronName = Annotated[
    str,
    _matching(
        r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?",
        "{value!r} is not a name of at most 52 characters a-z, 0-9, '-'",
    ),
]


# What Argo's CronWorkflow parser (robfig/cron, standard fields and descriptors) takes.
CRON_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
GO_DURATION = re.compile(r"(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+")


def _cron(value: str) -> str:
    """A schedule Argo accepts: 5 fields (minute hour day-of-month month day-of-week, with
    ``*``, ``,``, ``-``, ``/``, ``?`` and month or day names), a descriptor such as
    ``@daily``, or ``@every <duration>``."""
    text = value.strip()
    if text.startswith("@every "):
        if not GO_DURATION.fullmatch(text.removeprefix("@every ").strip()):
            raise ValueError(f"{value!r}: @every takes a duration such as 90m or 1h30m")
        return value
    if text.startswith("@"):
        if text not in CRON_DESCRIPTORS:
            raise ValueError(f"{value!r} is not one of {', '.join(CRON_DESCRIPTORS)} or @every")
        return value
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(
            f"{value!r} has {len(fields)} fields; a cron schedule has 5 (minute hour "
            "day-of-month month day-of-week), e.g. '0 2 * * *'"
        )
    if re.search(r"[LW#]", re.sub(r"[A-Z]{3}", "", text.upper())):  # JUL, WED are names
        raise ValueError(f"{value!r}: L, W and # are not cron syntax Argo accepts")
    from cronsim import CronSim, CronSimError  # here: only a config that has a schedule pays

    try:
        CronSim(text.replace("?", "*"), datetime(2000, 1, 1))
    except CronSimError as exc:
        raise ValueError(f"{value!r} is not a valid cron schedule ({exc})") from None
    return value


CronSchedule = Annotated[str, AfterValidator(_cron)]


def _timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{value!r} is not an IANA time zone, e.g. UTC, Europe/Berlin, America/New_York"
        ) from None
    return value


Timezone = Annotated[str, AfterValidator(_timezone)]


def _versioned(value: str) -> str:
    if value == "latest" or not value:
        raise ValueError("images must be versioned: use the package version, not 'latest'")
    return value


ImageTag = Annotated[str, AfterValidator(_versioned)]

ImageDigest = Annotated[
    str,
    _matching(r"sha256:[0-9a-f]{64}", "{value!r} is not an image digest: sha256:<64 hex digits>"),
]
