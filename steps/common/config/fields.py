"""Field types the config sections share: each check written once, named by what it holds.

A check failing raises ``ValueError``; pydantic reports it under the field's name, and
``load_config`` adds where the value came from.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


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


def _cron_fields(value: str) -> str:
    if not (value.startswith("@") or len(value.split()) == 5):
        raise ValueError(f"{value!r} is not a cron expression of 5 fields (or @daily...)")
    return value


CronSchedule = Annotated[str, AfterValidator(_cron_fields)]


def _versioned(value: str) -> str:
    if value == "latest" or not value:
        raise ValueError("images must be versioned: use the package version, not 'latest'")
    return value


ImageTag = Annotated[str, AfterValidator(_versioned)]
