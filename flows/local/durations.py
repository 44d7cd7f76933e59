"""Argo's durations: seconds (``30``) or Go durations (``30s``, ``1m30s``, ``500ms``), as a
retry's backoff, a template's ``timeout`` and memoize's ``maxAge`` take them."""

from __future__ import annotations

import re

from flows.local.errors import UnsupportedFeature

DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400,
}  # fmt: skip
DURATION_PART = r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)"


def parse_duration(text: str | int | float) -> float:
    """Seconds of an Argo duration: a number of seconds (``30``) or a Go duration
    (``30s``, ``1m30s``, ``500ms``, ``2h``); ``1d`` too, as memoize's maxAge takes it."""
    value = str(text).strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return float(value)
    if not value or not re.fullmatch(f"(?:{DURATION_PART})+", value):
        raise UnsupportedFeature(
            f"duration {text!r} (use seconds or a Go duration such as 30s, 1m30s, 500ms)"
        )
    return sum(float(n) * DURATION_UNITS[u] for n, u in re.findall(DURATION_PART, value))
