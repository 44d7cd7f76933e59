"""The live check's HTTP client, stdlib only: one keep-alive connection per thread, connect
and read timeouts, and the scoring protocol of ``mlflow models serve`` (which ``python -m
steps.serve`` speaks too): ``POST /invocations`` with ``{"inputs": ...}``, answered by
``{"predictions": [{"class": ..., ...}, ...]}``; ``GET /ping`` 200 once the model is loaded."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from urllib.parse import urlparse


class Unreachable(RuntimeError):
    """No HTTP answer at all: refused, reset, timed out, or a name that does not resolve."""


class BadAnswer(RuntimeError):
    """An answer that is not the predictions asked for: a status other than 200, a body
    that is not JSON, or rows missing, extra or out of range."""


class Endpoint:
    """``base`` (``http://host:port[/prefix]``): each thread keeps its own connection."""

    def __init__(self, base: str, timeout_s: float) -> None:
        parsed = urlparse(base)
        self.base = base.rstrip("/")
        self.secure = parsed.scheme == "https"
        self.host = parsed.hostname or ""
        self.port = parsed.port
        self.prefix = parsed.path.rstrip("/")
        self.timeout_s = timeout_s
        self.local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            kind = http.client.HTTPSConnection if self.secure else http.client.HTTPConnection
            conn = kind(self.host, self.port, timeout=self.timeout_s)
            self.local.conn = conn
        return conn

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """One request on this thread's connection; a stale keep-alive is retried once."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request(method, self.prefix + path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                if attempt:  # a fresh connection failed too
                    raise Unreachable(f"{self.base}{path}: {_reason(exc)}") from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise Unreachable(f"{self.base}{path}: {_reason(exc)}") from None
        raise AssertionError("unreachable")  # for the type checker: the loop returns or raises

    def close(self) -> None:
        conn = getattr(self.local, "conn", None)
        if conn is not None:
            conn.close()
            self.local.conn = None

    def wait_ready(self, within_s: float) -> None:
        """``GET /ping`` until 200, for at most ``within_s``; else Unreachable naming the last
        answer (a server still loading answers 503)."""
        deadline = time.monotonic() + within_s
        last = "no answer"
        while True:
            try:
                status, _ = self.request("GET", "/ping")
                if status == 200:
                    return
                last = f"GET /ping answered {status}"
            except Unreachable as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise Unreachable(f"{last} (waited {within_s:g} s)")
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def classify(self, body: bytes, count: int) -> list[int]:
        """POST one encoded batch of ``count`` images; the classes it came back with."""
        status, data = self.request("POST", "/invocations", body)
        if status != 200:
            raise BadAnswer(f"POST /invocations answered {status}: {_first_line(data)}")
        try:
            rows = json.loads(data)["predictions"]
            classes = [row["class"] for row in rows]
        except (ValueError, KeyError, TypeError):
            raise BadAnswer(
                f"POST /invocations answered 200 without predictions: {_first_line(data)}"
            ) from None
        if len(classes) != count:
            raise BadAnswer(f"sent {count} images, got {len(classes)} predictions back")
        return classes


def encode(images) -> bytes:
    """``{"inputs": N x 32 x 32 x 3 whole numbers}``, as the scoring protocol takes it."""
    return json.dumps({"inputs": images.tolist()}, separators=(",", ":")).encode()


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _first_line(data: bytes) -> str:
    text = data.decode(errors="replace").strip()
    with contextlib.suppress(ValueError, AttributeError):  # MLflow's {"message": "<line>"}
        text = str(json.loads(text).get("message", text))
    lines = text.splitlines()
    return (lines[0] if lines else "(empty body)")[:300]
