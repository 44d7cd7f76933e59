"""How a piece of work run in a child process failed (``steps.common.isolation``): the
record a failed variant carries in ``variants.json`` and ``benchmark.json``."""

from __future__ import annotations

from typing import Literal

from pydantic.dataclasses import dataclass

from steps.common.contracts.base import STRICT, Part

# crashed: killed by a signal (SIGSEGV, SIGABRT, ...); timed_out: still running at its
# limit, then stopped; exited: ended with an exit code and no result; raised: a Python
# exception in the work itself.
FailureCause = Literal["crashed", "timed_out", "exited", "raised"]


@dataclass(frozen=True, config=STRICT)
class ProcessFailure(Part):
    """Why the child's work did not finish: the cause, the signal or the limit, and where
    the failing thread was (its innermost Python frame, from faulthandler, or the
    exception's), each ``null`` where it does not apply."""

    cause: FailureCause
    message: str  # one line, what the step's log and the variant's reason say
    signal: str | None = None  # crashed: SIGSEGV, SIGABRT, ...
    exit_code: int | None = None  # exited
    limit_s: float | None = None  # timed_out: the limit it ran past
    frame: str | None = None  # 'File "x.py", line 3 in f'
