"""Times as the argo CLI prints them (argo-workflows v4.0.5 util/humanize/humanize.go over
dustin/go-humanize's ``CustomRelTime``): the short durations of ``argo list`` and ``argo
get`` (``0s``, ``42s``, ``3m``, ``1h``), the long ones of its header (``1 minute 30
seconds``), and its timestamps (``Mon Jan 02 15:04:05 -0700 (3 minutes ago)``)."""

from __future__ import annotations

import time
from datetime import datetime

SECOND, MINUTE, HOUR = 1, 60, 3600
DAY, WEEK = 24 * HOUR, 7 * 24 * HOUR
MONTH, YEAR = 30 * DAY, 12 * 30 * DAY  # go-humanize's Month and Year
LONG_TIME = 37 * YEAR
FOREVER = float("inf")

# (below this many seconds, format, divided by): humanize.go's shortTimeMagnitudes
SHORT = [
    (SECOND, "0s", SECOND),
    (2 * SECOND, "1s", 1),
    (MINUTE, "%ds", SECOND),
    (2 * MINUTE, "1m", 1),
    (HOUR, "%dm", MINUTE),
    (2 * HOUR, "1h", 1),
    (DAY, "%dh", HOUR),
    (2 * DAY, "1d", 1),
    (WEEK, "%dd", DAY),
]
# humanize.go's relativeMagnitudes (the header's Duration, without a label)
LONG = [
    (SECOND, "0 seconds", SECOND),
    (2 * SECOND, "1 second", 1),
    (MINUTE, "%d seconds", SECOND),
    (2 * MINUTE, "1 minute", 1),
    (HOUR, "%d minutes", MINUTE),
    (2 * HOUR, "1 hour", 1),
    (DAY, "%d hours", HOUR),
    (2 * DAY, "1 day", 1),
    (WEEK, "%d days", DAY),
    (2 * WEEK, "1 week", 1),
    (MONTH, "%d weeks", WEEK),
    (2 * MONTH, "1 month", 1),
    (YEAR, "%d months", MONTH),
    (18 * MONTH, "1 year", 1),
    (2 * YEAR, "2 years", 1),
    (LONG_TIME, "%d years", YEAR),
    (FOREVER, "a long while", 1),
]
# go-humanize's defaultMagnitudes (humanize.Time: "3 minutes ago")
AGO = [(SECOND, "now", SECOND), *LONG[1:]]


def _relative(seconds: float, magnitudes: list[tuple[float, str, float]]) -> str:
    """go-humanize's CustomRelTime: the first magnitude above the difference (the last
    one beyond them all), its count truncated as Go's integer division truncates."""
    diff = abs(seconds)
    _, text, divide_by = next((m for m in magnitudes if diff < m[0]), magnitudes[-1])
    return text % int(diff // divide_by) if "%d" in text else text


def short(started: float | None, finished: float | None, now: float | None = None) -> str:
    """``RelativeDurationShort``: from start to finish, to now while it runs; ``0s``
    for a node that never started."""
    if started is None:
        return "0s"
    end = finished if finished is not None else (time.time() if now is None else now)
    return _relative(end - started, SHORT)


def duration(seconds: float) -> str:
    """``Duration``: up to two units (``59 seconds``, ``1 minute 30 seconds``)."""
    whole = _relative(seconds, LONG)
    if seconds < MINUTE:
        return whole
    if seconds < HOUR:
        return f"{whole} {int(seconds % MINUTE)} seconds"
    if seconds < DAY:
        return f"{whole} {int(seconds // MINUTE % 60)} minutes"
    return f"{whole} {int(seconds // HOUR % 24)} hours"


def long(started: float | None, finished: float | None, now: float | None = None) -> str:
    """``RelativeDuration``: the header's Duration, to now while it runs."""
    if started is None:
        return duration(0)
    end = finished if finished is not None else (time.time() if now is None else now)
    return duration(end - started)


def timestamp(epoch: float, now: float | None = None) -> str:
    """``Timestamp``: Go's ``Mon Jan 02 15:04:05 -0700`` in local time, and how long ago."""
    when = datetime.fromtimestamp(epoch).astimezone()
    diff = (time.time() if now is None else now) - epoch
    ago = _relative(diff, AGO)
    if ago != "now":
        ago += " ago" if diff >= 0 else " from now"
    return f"{when.strftime('%a %b %d %H:%M:%S %z')} ({ago})"
