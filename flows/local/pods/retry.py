"""How long a pod's attempts may run and when a failed one is tried again, as Argo decides
(workflow/controller/operator.go ``processNodeRetries``, ``checkTemplateTimeouts``).

- ``retryStrategy.limit``: retries after the first attempt; none given: no limit. A non-zero
  exit is a Failure, which ``OnError`` and ``OnTransientError`` do not retry.
- ``backoff``: the n-th retry waits ``duration * factor^(n-1)``, at most ``cap``. With
  ``maxDuration``, counted from the first attempt's start: past it no retry starts ("Max
  duration limit exceeded"), a wait that would end past it is not begun ("Backoff would
  exceed max duration limit"), and every retry is stopped at it (its pod's deadline).
- ``expression``: evaluated after a failed attempt the limit and backoff would retry, over
  ``lastRetry.exitCode|status|duration|message`` (``buildRetryStrategyLocalScope``); false
  ends the retries ("retryStrategy.expression evaluated to false").
- ``timeout`` on a pod's template: each attempt is stopped that long after it started, as
  ``activeDeadlineSeconds`` stops a pod (the smaller of the two wins).
- ``{{retries}}`` (the attempt, from 0) and ``{{lastRetry.exitCode|status|duration|message}}``
  (the attempt before: ``0``, empty, ``0``, empty for the first) in a template with a
  ``retryStrategy``, filled in per attempt as Argo's ``executeTemplate`` does.
- durations: seconds or Go durations (``flows.local.durations``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from flows.local.durations import parse_duration
from flows.local.errors import ExpressionError
from flows.local.expr.evaluate import environment, evaluate
from flows.local.status import TaskRecord
from flows.local.substitution import EXPRESSION

RETRY_VARIABLES = (
    "retries", "lastRetry.exitCode", "lastRetry.status", "lastRetry.duration", "lastRetry.message",
)  # fmt: skip


def retry_placeholders(template: dict[str, Any]) -> dict[str, str]:
    """The retry variables left in place when a template is resolved, filled per attempt."""
    if template.get("retryStrategy") is None:
        return {}
    return {name: f"{{{{{name}}}}}" for name in RETRY_VARIABLES}


def fill_retry_variables(node: Any, attempt: int, record: TaskRecord, seconds: float) -> Any:
    """``node`` with the retry variables of attempt ``attempt`` (0-based) filled in."""
    values = {
        "retries": str(attempt),
        "lastRetry.exitCode": str(record.exit_code if attempt and record.exit_code else 0),
        "lastRetry.status": "Failed" if attempt else "",
        "lastRetry.duration": f"{seconds:g}" if attempt else "0",
        "lastRetry.message": record.message if attempt else "",
    }
    if isinstance(node, str):
        return EXPRESSION.sub(lambda m: values.get(m.group(1), m.group(0)), node)
    if isinstance(node, dict):
        return {k: fill_retry_variables(v, attempt, record, seconds) for k, v in node.items()}
    if isinstance(node, list):
        return [fill_retry_variables(v, attempt, record, seconds) for v in node]
    return node


def _seconds(value: Any) -> float | None:
    return None if value in (None, "") else parse_duration(value)


@dataclass
class Backoff:
    limit: int
    duration: float = 0.0
    factor: float = 1.0
    cap: float | None = None
    max_duration: float | None = None
    timeout: float | None = None
    expression: str = ""  # retryStrategy.expression, its {{...}} tags already filled
    first: float = field(default_factory=time.time)
    gave_up: str = ""  # Argo's message when the backoff, not the limit, ended the retries

    @classmethod
    def of(cls, template: dict[str, Any]) -> Backoff:
        """The retry rules of a resolved template; the clock starts with its first attempt."""
        retry = template.get("retryStrategy")
        limit = 0 if retry is None else int(retry.get("limit", sys.maxsize))
        if retry and retry.get("retryPolicy") in ("OnError", "OnTransientError"):
            limit = 0
        backoff = (retry or {}).get("backoff") or {}
        factor = float(backoff.get("factor") or 1)
        return cls(
            limit=limit,
            duration=_seconds(backoff.get("duration")) or 0.0,
            factor=factor if factor > 0 else 1.0,  # Argo: no factor, or 0, waits duration
            cap=_seconds(backoff.get("cap")),
            max_duration=_seconds(backoff.get("maxDuration")),
            timeout=_seconds(template.get("timeout")),
            expression=str((retry or {}).get("expression") or ""),
        )

    def attempt_deadline(self, deadline_s: float | None, attempt: int) -> float | None:
        """Seconds this attempt may run: its template's deadline, its timeout and, for a
        retry, what is left of ``maxDuration``."""
        limits = [s for s in (deadline_s, self.timeout) if s is not None]
        if self.max_duration is not None and attempt > 0:
            limits.append(max(self.first + self.max_duration - time.time(), 0.001))
        return min(limits, default=None)

    def after_failure(self, attempt: int) -> tuple[float, bool]:
        """The wait before the next attempt after attempt ``attempt`` (0-based) failed, and
        whether ``maxDuration`` ends the retries here."""
        now = time.time()
        if self.max_duration is not None and now > self.first + self.max_duration:
            self.gave_up = "Max duration limit exceeded"
            return 0.0, True
        wait_s = self.duration * self.factor**attempt
        if self.cap is not None:
            wait_s = min(wait_s, self.cap)
        if self.max_duration is not None and now + wait_s > self.first + self.max_duration:
            self.gave_up = "Backoff would exceed max duration limit"
            return wait_s, True
        return wait_s, False

    def expression_allows(self, record: TaskRecord, seconds: float) -> bool:
        """``retryStrategy.expression`` over the attempt that just failed (Argo's
        ``buildRetryStrategyLocalScope``); false ends the retries. One that cannot be
        evaluated raises ``ExpressionError``: Argo's node is then an Error."""
        if not self.expression:
            return True
        scope = {
            "retries": str(record.attempts - 1),
            "lastRetry.exitCode": str(-1 if record.exit_code is None else record.exit_code),
            "lastRetry.status": "Failed",  # a non-zero exit; an Error is never retried here
            # whole seconds: Argo's node timestamps (metav1.Time) keep no fraction
            "lastRetry.duration": str(int(seconds)),
            "lastRetry.message": f"Error (exit code {record.exit_code})",
        }
        try:
            allowed = evaluate(self.expression, environment(scope))
        except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError) as exc:
            raise ExpressionError(f"retryStrategy.expression {self.expression!r}: {exc}") from None
        if not isinstance(allowed, bool):
            raise ExpressionError(
                f"retryStrategy.expression {self.expression!r}: {allowed!r} is not a boolean"
            )
        if not allowed:
            self.gave_up = "retryStrategy.expression evaluated to false"
        return allowed
