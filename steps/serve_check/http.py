"""The live check's view of the endpoint: the project's serving client
(``steps.common.serving.client``: keep-alive, timeouts), one per thread, speaking the
protocol the endpoint answers (``serving.check_protocol``): the Open Inference Protocol
with binary tensors, which ``python -m steps.serve`` declares at ``GET /v2`` and KServe's
own clients use, or MLflow's scoring protocol (``/invocations``), the one ``mlflow models
serve`` has. The check's two failures told apart: nothing answered (``Unreachable``) or
a wrong answer (``BadAnswer``)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import numpy as np

from steps.common.serving.client import (
    ServingClient,
    ServingError,
    infer_path,
    oip_request,
    request_body,
)

OPEN_INFERENCE = "v2"  # POST /v2/models/<name>/infer, the images' bytes after a JSON header
MLFLOW = "mlflow"  # POST /invocations, {"inputs": N x 32 x 32 x 3 whole numbers}
BINARY_EXTENSION = "binary_tensor_data"  # what a server lists at GET /v2 to take bytes


@dataclass(frozen=True)
class Request:
    """One batch of images, encoded once for the endpoint's protocol."""

    path: str
    body: bytes
    headers: dict[str, str]


class Unreachable(RuntimeError):
    """No HTTP answer at all: refused, reset, timed out, or a name that does not resolve."""


class BadAnswer(RuntimeError):
    """An answer that is not the predictions asked for: a status other than 200, a body
    that is not JSON, or rows missing, extra or out of range."""


class Endpoint:
    """``base`` (``http://host:port[/prefix]``): each thread keeps its own client.
    ``protocol``: ``auto`` (``choose_protocol`` asks the server), ``v2`` or ``mlflow``;
    ``model``: the name the Open Inference Protocol's routes take."""

    def __init__(
        self, base: str, timeout_s: float, protocol: str = "auto", model: str = ""
    ) -> None:
        self.base = base.rstrip("/")
        self.timeout_s = timeout_s
        self.protocol, self.model = protocol, model
        self.local = threading.local()

    def choose_protocol(self) -> str:
        """The protocol the check speaks: as configured, or with ``auto`` the Open Inference
        Protocol where the server declares its binary extension at ``GET /v2``, else
        MLflow's scoring protocol."""
        if self.protocol == "auto":
            extensions = self._client().server_extensions() or []
            self.protocol = OPEN_INFERENCE if BINARY_EXTENSION in extensions else MLFLOW
        return self.protocol

    def encode(self, images: np.ndarray) -> Request:
        """``images`` (uint8 N x 32 x 32 x 3) as one request in the chosen protocol."""
        if self.choose_protocol() == OPEN_INFERENCE:
            body, headers = oip_request(images, binary=True, outputs=["class"])
            return Request(infer_path(self.model), body, headers)
        return Request("/invocations", request_body(images), {"Content-Type": "application/json"})

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

    def wait_version(
        self, name: str, version: str, within_s: float, confirm: int = 3, waited_s: float = 0.0
    ) -> bool:
        """``GET /v2/models/<name>`` until ``confirm`` answers in a row, each on a new
        connection (a Service spreads connections over its pods), say ``version`` alone is
        served: True; at most ``within_s``, else BadAnswer naming what it served; False
        from a server without that route (``mlflow models serve``: not confirmed). A
        re-applied InferenceService reads Ready from its previous status before its new
        pods roll out (flows/pipeline/serving_templates.py), so this, not the deploy step,
        confirms it.
        ``waited_s``: how long the caller waited before (the message names the total)."""
        deadline = time.monotonic() + within_s
        matched, last = 0, "no answer"
        while True:
            with ServingClient(self.base, self.timeout_s) as client:
                try:
                    versions = client.served_versions(name)
                    if versions is None:
                        return False
                    last = ", ".join(f"v{v}" for v in versions) or "no registry version"
                    matched = matched + 1 if versions == [version] else 0
                except ServingError as exc:
                    matched, last = 0, str(exc)
            if matched >= confirm:
                return True
            if time.monotonic() >= deadline:
                if matched:  # right, but not yet as often as asked
                    raise BadAnswer(
                        f"{name} v{version} named by {matched} of {confirm} answers in a row "
                        f"within {waited_s + within_s:g} s"
                    )
                raise BadAnswer(
                    f"it serves {last}, not {name} v{version} that this run deployed "
                    f"(waited {waited_s + within_s:g} s)"
                )
            time.sleep(min(0.5 if matched == 0 else 0.05, max(0.0, deadline - time.monotonic())))

    def classify(self, request: Request, count: int) -> list[int]:
        """Send one encoded batch of ``count`` images; the classes it came back with."""
        route = f"POST {request.path}"
        try:
            if request.path == "/invocations":
                rows = self._client().post(request.body)
            else:
                outputs = self._client().post_infer(request.path, request.body, request.headers)
        except ServingError as exc:
            if exc.status == 0:
                raise Unreachable(str(exc)) from None
            raise BadAnswer(f"{route} answered {exc}") from None
        if request.path == "/invocations":
            try:
                classes = [row["class"] for row in json.loads(rows)["predictions"]]
            except (ValueError, KeyError, TypeError):
                first = rows[:300].decode(errors="replace")
                raise BadAnswer(f"{route} answered 200 without predictions: {first}") from None
        else:
            if "class" not in outputs:
                raise BadAnswer(f"{route} answered 200 without a class output: {sorted(outputs)}")
            classes = outputs["class"].reshape(-1).tolist()
        if len(classes) != count:
            raise BadAnswer(f"sent {count} images, got {len(classes)} predictions back")
        return classes
