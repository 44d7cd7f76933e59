"""A client of the serving endpoint (``python -m steps.serve``, or ``mlflow models serve``
of the champion): post uint8 images, get their classes. Standard library only, one
keep-alive connection per client, a timeout on every socket operation.

    client = ServingClient("http://127.0.0.1:8080", timeout_s=30)
    classes = client.classes(images)     # uint8 N x 32 x 32 x 3 -> [int] * N
    client.close()
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any

import numpy as np


class ServingError(RuntimeError):
    """The endpoint answered with an error or not at all; ``status`` 0 when it did not."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


def request_body(images: np.ndarray) -> bytes:
    """The JSON body MLflow's scoring protocol takes for a tensor: ``{"inputs": ...}``."""
    return json.dumps({"inputs": np.asarray(images).tolist()}).encode()


class ServingClient:
    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: give the endpoint as http://HOST:PORT")
        self.url = url.rstrip("/")
        self.base = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        self._connection = kind(parts.hostname, parts.port, timeout=timeout_s)

    def post(self, body: bytes) -> bytes:
        """POST a ready JSON body to /invocations; the 200 answer's bytes, else ServingError."""
        status, data = self._request("POST", "/invocations", body)
        if status != 200:
            try:
                message = json.loads(data)["message"]
            except (ValueError, KeyError, TypeError):
                message = data[:200].decode(errors="replace")
            raise ServingError(status, message)
        return data

    def predict(self, images: np.ndarray) -> list[dict[str, Any]]:
        """One row per image: ``class``, ``class_name``, ``probabilities``."""
        return json.loads(self.post(request_body(images)))["predictions"]

    def classes(self, images: np.ndarray) -> list[int]:
        return [int(row["class"]) for row in self.predict(images)]

    def served_versions(self, name: str) -> list[str] | None:
        """The registry versions ``GET /v2/models/<name>`` says are served (the Open
        Inference Protocol's model metadata, which ``python -m steps.serve`` answers);
        None from a server without that route (``mlflow models serve``); ServingError for
        an answer naming another model, or any other error."""
        status, data = self._request("GET", f"/v2/models/{name}", None)
        try:
            doc = json.loads(data)
            if status == 200:
                return [str(v) for v in doc["versions"]]
            message = doc["message"]  # ours: "no model <name> here; this serves <other>"
        except (ValueError, KeyError, TypeError):
            if status == 404:
                return None
            message = data[:200].decode(errors="replace")
        raise ServingError(status, f"GET /v2/models/{name}: {message}")

    def status(self, path: str) -> int:
        """The HTTP status of ``GET path`` (a health probe); 0 when nothing answers."""
        try:
            return self._request("GET", path, None)[0]
        except ServingError:
            return 0

    def wait_ready(self, timeout_s: float, path: str = "/v2/health/ready") -> None:
        """Until ``path`` answers 200, at most ``timeout_s``; else ServingError."""
        deadline = time.monotonic() + timeout_s
        while (code := self.status(path)) != 200:
            if time.monotonic() > deadline:
                raise ServingError(code, f"{self.url}{path} not ready after {timeout_s:g} s")
            time.sleep(0.2)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> ServingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        for attempt in (1, 2):  # a kept-alive connection the server closed: once more, anew
            try:
                self._connection.request(method, self.base + path, body=body, headers=headers)
                response = self._connection.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._connection.close()
                if attempt == 2:
                    raise ServingError(0, f"{self.url}{path}: the connection was closed") from None
            except (OSError, http.client.HTTPException) as exc:
                self._connection.close()
                raise ServingError(0, f"{self.url}{path}: {exc or type(exc).__name__}") from None
        raise AssertionError("unreachable")


def predict_classes(url: str, images: np.ndarray, timeout_s: float = 30.0) -> list[int]:
    """The classes of ``images`` (uint8 N x 32 x 32 x 3) from the endpoint at ``url``."""
    with ServingClient(url, timeout_s) as client:
        return client.classes(images)
