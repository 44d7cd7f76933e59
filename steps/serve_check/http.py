"""The live check's view of the endpoint: the project's serving client
(``steps.common.serving.client``: keep-alive, timeouts, the scoring protocol of ``mlflow
models serve`` and ``python -m steps.serve``), one per thread, with the check's two
failures told apart: nothing answered (``Unreachable``) or a wrong answer (``BadAnswer``)."""

from __future__ import annotations

import json
import threading
import time

from steps.common.serving.client import ServingClient, ServingError, request_body

encode = request_body  # {"inputs": N x 32 x 32 x 3 whole numbers}


class Unreachable(RuntimeError):
    """No HTTP answer at all: refused, reset, timed out, or a name that does not resolve."""


class BadAnswer(RuntimeError):
    """An answer that is not the predictions asked for: a status other than 200, a body
    that is not JSON, or rows missing, extra or out of range."""


class Endpoint:
    """``base`` (``http://host:port[/prefix]``): each thread keeps its own client."""

    def __init__(self, base: str, timeout_s: float) -> None:
        self.base = base.rstrip("/")
        self.timeout_s = timeout_s
        self.local = threading.local()

    def _client(self) -> ServingClient:
        client = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = ServingClient(self.base, self.timeout_s)
        return client

    def close(self) -> None:
        client = getattr(self.local, "client", None)
        if client is not None:
            client.close()
            self.local.client = None

    def wait_ready(self, within_s: float) -> None:
        """``GET /ping`` until 200, for at most ``within_s``; else Unreachable naming the last
        answer (a server still loading answers 503)."""
        deadline = time.monotonic() + within_s
        while (status := self._client().status("/ping")) != 200:
            if time.monotonic() >= deadline:
                last = f"GET /ping answered {status}" if status else f"{self.base}: no answer"
                raise Unreachable(f"{last} (waited {within_s:g} s)")
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def classify(self, body: bytes, count: int) -> list[int]:
        """POST one encoded batch of ``count`` images; the classes it came back with."""
        try:
            rows = self._client().post(body)
        except ServingError as exc:
            if exc.status == 0:
                raise Unreachable(str(exc)) from None
            raise BadAnswer(f"POST /invocations answered {exc}") from None
        try:
            classes = [row["class"] for row in json.loads(rows)["predictions"]]
        except (ValueError, KeyError, TypeError):
            first = rows[:300].decode(errors="replace")
            raise BadAnswer(
                f"POST /invocations answered 200 without predictions: {first}"
            ) from None
        if len(classes) != count:
            raise BadAnswer(f"sent {count} images, got {len(classes)} predictions back")
        return classes
