"""The HTTP API, a bare ASGI application served by uvicorn (MLflow's scoring server runs
on the same uvicorn; FastAPI's routing and request objects are left out: they cost more per
request than this whole module does).

    GET  /ping, /health       200 once the model is loaded, 503 before (MLflow's probe)
    GET  /v2/health/live      200 while the process serves (KServe's liveness probe)
    GET  /v2/health/ready     200 once the model is loaded, 503 before (KServe's readiness)
    GET  /version             the MLflow version, as ``mlflow models serve``
    GET  /v2/models/<name>    what is served, as the Open Inference Protocol's model metadata:
                              {"name", "versions": [registry version], "platform"}; 404 for
                              another name (a client confirms the version it deployed)
    POST /invocations         {"inputs": images} -> {"predictions": [...]}, MLflow's protocol

A request body past what ``serving.max_request_images`` images can take is refused with 413
from its Content-Length before a byte of it is read, or, sent without one (chunked), as soon
as what arrived passes that size; a request of more images is refused before its values
become an array. A bad request gets MLflow's 400 with one line and never joins a batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.version import VERSION

from steps.serve.batcher import Batcher
from steps.serve.predictor import Predictor, RequestTooLarge, encode, error_body

JSON = b"application/json"
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _message(error_code: str, message: str) -> bytes:
    return json.dumps({"error_code": error_code, "message": message}).encode()


class ServingApp:
    """The ASGI app. ``predictor`` and ``batcher`` are set by ``loaded`` once the model is
    ready (the port is bound before, so a probe sees 503 while it loads)."""

    def __init__(self, model_name: str = "model", model_version: str | None = None) -> None:
        self.model_name = model_name
        self.metadata = json.dumps(
            {
                "name": model_name,
                "versions": [model_version] if model_version else [],
                "platform": "mlflow_pyfunc",
            }
        ).encode()
        self.predictor: Predictor | None = None
        self.batcher: Batcher | None = None
        self.started = time.monotonic()

    def loaded(self, predictor: Predictor, batcher: Batcher) -> None:
        self.batcher = batcher
        self.predictor = predictor  # last: readiness follows it

    @property
    def ready(self) -> bool:
        return self.predictor is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan is off; websockets are not served
            return
        method, path = scope["method"], scope["path"]
        if path == "/invocations":
            if method != "POST":
                await respond(send, 405, _message("BAD_REQUEST", "POST /invocations"))
                return
            await self.invocations(scope, receive, send)
            return
        if method != "GET":
            await respond(send, 405, _message("BAD_REQUEST", f"{method} {path}: use GET"))
            return
        if path in ("/ping", "/health"):
            await respond(send, 200 if self.ready else 503, b"\n")
        elif path == "/v2/health/live":
            await respond(send, 200, b'{"live": true}')
        elif path == "/v2/health/ready":
            body = b'{"ready": true}' if self.ready else b'{"ready": false}'
            await respond(send, 200 if self.ready else 503, body)
        elif path == "/version":
            await respond(send, 200, VERSION.encode())
        elif path.startswith("/v2/models/"):
            name = path.removeprefix("/v2/models/")
            if name == self.model_name:
                await respond(send, 200, self.metadata)
            else:
                message = f"no model {name} here; this serves {self.model_name}"
                await respond(send, 404, _message("RESOURCE_DOES_NOT_EXIST", message))
        else:
            await respond(send, 404, _message("ENDPOINT_NOT_FOUND", f"no endpoint {path}"))

    async def invocations(self, scope: Scope, receive: Receive, send: Send) -> None:
        predictor, batcher = self.predictor, self.batcher
        if predictor is None or batcher is None:
            await respond(send, 503, _message("TEMPORARILY_UNAVAILABLE", "the model is loading"))
            return
        headers = dict(scope["headers"])
        mime, _, params = headers.get(b"content-type", b"").partition(b";")
        charset = params.strip().lower()
        if mime.strip().lower() != JSON or charset not in (b"", b"charset=utf-8"):
            got = headers.get(b"content-type", b"").decode("latin-1") or "none"
            await respond(
                send,
                415,
                _message("BAD_REQUEST", f"send Content-Type: application/json; got {got}"),
            )
            return
        too_large = _message(
            "BAD_REQUEST",
            f"request body over {predictor.max_body} bytes, more than "
            f"{predictor.max_images} images (serving.max_request_images) can take",
        )
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > predictor.max_body):
            await respond(send, 413, too_large)
            return
        batcher.arrive()
        queued = False
        try:
            body = await read_body(receive, predictor.max_body)
            if body is None:
                await respond(send, 413, too_large)
                return
            pending = batcher.enqueue(predictor.parse(body), encode)
            queued = True
        except MlflowException as exc:
            await respond(send, *error_body(exc))
            return
        except RequestTooLarge as exc:
            await respond(send, 413, _message("BAD_REQUEST", str(exc)))
            return
        except ConnectionError:  # the client left before its body arrived: no one to answer
            return
        finally:
            if not queued:
                batcher.left()
        try:
            answer = await pending
        except Exception as exc:  # the model failed on this batch: one line, as MLflow's 500
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            await respond(send, 500, _message("INTERNAL_ERROR", f"{type(exc).__name__}: {line}"))
            return
        await respond(send, 200, answer)


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit`` bytes (the rest unread)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(send: Send, status: int, body: bytes, content_type: bytes = JSON) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
