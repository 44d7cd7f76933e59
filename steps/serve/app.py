"""The HTTP API, a bare ASGI application served by uvicorn (MLflow's scoring server runs
on the same uvicorn; FastAPI's routing and request objects are left out: they cost more per
request than this whole module does).

    GET  /ping, /health       200 once the model is loaded, 503 before (MLflow's probe)
    GET  /version             the MLflow version, as ``mlflow models serve``
    POST /invocations         {"inputs": images} -> {"predictions": [...]}, MLflow's protocol
    Open Inference Protocol (KServe's v2; errors as {"error": "..."}):
    GET  /v2/health/live      200 while the process serves (KServe's liveness probe)
    GET  /v2/health/ready     200 once the model is loaded, 503 before (KServe's readiness)
    GET  /v2                  the server's metadata: the binary_tensor_data extension
    GET  /v2/models/<name>[/versions/<v>]    its metadata (registry version, input, outputs)
    GET  /v2/models/<name>[/versions/<v>]/ready    the model's readiness
    POST /v2/models/<name>[/versions/<v>]/infer    inference (steps.serve.oip): JSON tensors
                              or binary ones after the JSON header

A request body past what ``serving.max_request_images`` images can take is refused with 413
from its Content-Length before a byte of it is read, or, sent without one (chunked), as soon
as what arrived passes that size. Its JSON is bounded while it arrives (steps.serve.bounds:
depth, digits, arrays and elements), so a hostile body is refused within the chunk that
passes a bound; a large body is parsed off the event loop. A bad request gets a 4xx with one
line, in its protocol's error shape, and never joins a batch; both protocols share the
batcher. A refusal before the body was read whole says ``Connection: close`` and then reads
and drops the rest of the body within ``serving.linger_*`` (``steps.serve.asgi.refuse``, as
nginx's lingering close), so a client still sending reads the status, not a reset.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.version import VERSION

from steps.serve import oip
from steps.serve.asgi import (
    BINARY,
    JSON,
    Linger,
    Receive,
    Received,
    Scope,
    Send,
    off_loop,
    read_body,
    refuse,
    respond,
)
from steps.serve.batcher import Batcher
from steps.serve.bounds import BodyRefused
from steps.serve.outputs import encode
from steps.serve.predictor import Predictor, RequestTooLarge, error_body

SERVER_METADATA = json.dumps(
    {"name": "cifar-pipeline steps.serve", "version": "0.1.0", "extensions": ["binary_tensor_data"]}
).encode()


def _message(error_code: str, message: str) -> bytes:
    return json.dumps({"error_code": error_code, "message": message}).encode()


class ServingApp:
    """The ASGI app. ``predictor``, ``batcher`` and ``codec`` are set by ``loaded`` once the
    model is ready (the port is bound before, so a probe sees 503 while it loads)."""

    def __init__(
        self,
        model_name: str = "model",
        model_version: str | None = None,
        linger: Linger | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        # serving.linger_*; max_bytes -1: from the body bound, known once the model loaded
        self.linger = linger or Linger(-1, 30.0, 5.0)
        self.metadata = json.dumps(self._described({})).encode()
        self.predictor: Predictor | None = None
        self.batcher: Batcher | None = None
        self.codec: oip.OipCodec | None = None
        self.started = time.monotonic()

    def _described(self, extra: dict[str, Any]) -> dict[str, Any]:
        versions = [self.model_version] if self.model_version else []
        return {"name": self.model_name, "versions": versions, "platform": "mlflow_pyfunc", **extra}

    def loaded(self, predictor: Predictor, batcher: Batcher) -> None:
        """Ready to serve: one image of zeros through the model (a warm-up, on the caller's
        thread) says which outputs the protocol's metadata lists."""
        shape = tuple(abs(d) for d in predictor.shape[1:])
        codec = oip.OipCodec(
            self.model_name, self.model_version, predictor.dtype, shape, predictor.max_images
        )
        columns = predictor(np.zeros((1, *shape), predictor.dtype)).columns()
        outputs = {n: (oip.datatype(v.dtype), [-1, *v.shape[1:]]) for n, v in columns.items()}
        codec.outputs = list(outputs)
        self.metadata = json.dumps(codec.metadata(outputs)).encode()
        self.codec = codec
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
        if path.startswith("/v2/models/"):
            await self.v2_model(scope, receive, send, method, path)
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
        elif path in ("/v2", "/v2/"):
            await respond(send, 200, SERVER_METADATA)
        elif path == "/version":
            await respond(send, 200, VERSION.encode())
        else:
            await respond(send, 404, _message("ENDPOINT_NOT_FOUND", f"no endpoint {path}"))

    async def v2_model(
        self, scope: Scope, receive: Receive, send: Send, method: str, path: str
    ) -> None:
        """``/v2/models/<name>[/versions/<v>][/infer | /ready]``, errors as the protocol's."""
        name, _, rest = path.removeprefix("/v2/models/").partition("/")
        version = None
        if rest.startswith("versions/"):
            version, _, rest = rest.removeprefix("versions/").partition("/")
        action = rest.rstrip("/")
        if action not in ("", "infer", "ready"):
            await respond(send, 404, oip.error_body(f"no endpoint {path}"))
            return
        wanted = "POST" if action == "infer" else "GET"
        if method != wanted:
            await respond(send, 405, oip.error_body(f"{method} {path}: use {wanted}"))
            return
        missing = self._missing(name, version)
        if missing:
            await respond(send, 404, oip.error_body(missing))
        elif action == "infer":
            await self.infer(scope, receive, send)
        elif action == "ready":
            ready = json.dumps({"name": name, "ready": self.ready}).encode()
            await respond(send, 200 if self.ready else 503, ready)
        else:
            await respond(send, 200, self.metadata)

    def _missing(self, name: str, version: str | None) -> str | None:
        """Why ``name`` at ``version`` is not what this serves; None when it is."""
        if name != self.model_name:
            return f"no model {name} here; this serves {self.model_name}"
        if version is not None and version != self.model_version:
            served = f"version {self.model_version}" if self.model_version else "no version"
            return f"no version {version} of {name} here; this serves {served}"
        return None

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
            message = f"send Content-Type: application/json; got {got}"
            await respond(send, 415, _message("BAD_REQUEST", message))
            return

        async def fail(
            status: int, message: str, exc: MlflowException | None = None, unread: bool = False
        ) -> None:
            # MLflow's own body for its exceptions (error_class and sqlstate included), as
            # ``mlflow models serve`` answers them.
            answer = error_body(exc) if exc else (status, _message("BAD_REQUEST", message))
            await self._refuse(send, receive, *answer, unread)

        async def parse(body: bytes) -> tuple[np.ndarray, Callable]:
            return await off_loop(predictor.parse, body), encode

        answer = await self._queue(headers, receive, fail, parse, None)
        if answer is not None:
            await respond(send, 200, answer)

    async def infer(self, scope: Scope, receive: Receive, send: Send) -> None:
        predictor, batcher, codec = self.predictor, self.batcher, self.codec
        if predictor is None or batcher is None or codec is None:
            await respond(send, 503, oip.error_body("the model is loading"))
            return
        headers = dict(scope["headers"])

        async def fail(
            status: int, message: str, _exc: MlflowException | None = None, unread: bool = False
        ) -> None:
            await self._refuse(send, receive, status, oip.error_body(message), unread)

        given = headers.get(b"inference-header-content-length")
        if given is not None and not given.strip().isdigit():
            text = f"Inference-Header-Content-Length {given.decode('latin-1')!r}"
            return await fail(400, f"{text} is not a byte count")
        header_length = None if given is None else int(given)

        async def parse(body: bytes) -> tuple[np.ndarray, Callable]:
            request = await off_loop(codec.parse, body, header_length)
            return request.images, functools.partial(codec.encode, request=request)

        answer = await self._queue(headers, receive, fail, parse, header_length)
        if answer is None:
            return
        body, json_length = answer
        if json_length is None:
            await respond(send, 200, body)
        else:
            extra = [(b"inference-header-content-length", str(json_length).encode())]
            await respond(send, 200, body, BINARY, extra)

    async def _refuse(
        self, send: Send, receive: Receive, status: int, body: bytes, unread: bool
    ) -> None:
        """A refusal; ``unread``: the body was not read whole, so the answer closes the
        connection and the rest of the body is drained first (``asgi.refuse``)."""
        if not unread:
            await respond(send, status, body)
            return
        linger = self.linger
        if linger.max_bytes < 0:  # the default: twice the largest body taken
            limit = 2 * self.predictor.max_body if self.predictor is not None else 0
            linger = Linger(limit, linger.time_s, linger.timeout_s)
        await refuse(send, receive, status, body, linger)

    async def _queue(
        self,
        headers: dict[bytes, bytes],
        receive: Receive,
        fail: Callable[..., Awaitable[None]],
        parse: Callable[[bytes], Awaitable[tuple[np.ndarray, Callable]]],
        json_length: int | None,
    ) -> Any:
        """Read the body (bounded), parse it, queue its images: the encoded answer, or None
        once ``fail`` has answered (or the client left)."""
        predictor, batcher = self.predictor, self.batcher
        assert predictor is not None and batcher is not None
        too_large = (
            f"request body over {predictor.max_body} bytes, more than "
            f"{predictor.max_images} images (serving.max_request_images) can take"
        )
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > predictor.max_body):
            await fail(413, too_large, unread=True)
            return None
        batcher.arrive()
        received = Received()
        refusal: tuple[Any, ...] | None = None  # fail's arguments, answered once let go
        queued = False
        try:
            body = await read_body(
                receive, predictor.max_body, predictor.bounds(), json_length, received
            )
            if body is None:
                refusal = (413, too_large, None, not received.ended)
            else:
                images, finish = await parse(body)
                pending = batcher.enqueue(images, finish)
                queued = True
        except MlflowException as exc:
            refusal = (exc.get_http_status_code(), exc.message, exc)
        except RequestTooLarge as exc:
            refusal = (413, str(exc))
        except BodyRefused as exc:  # refused within a chunk: the rest may be on its way
            refusal = (exc.status, str(exc), None, not received.ended)
        except oip.OipError as exc:
            refusal = (exc.status, str(exc))
        except ConnectionError:  # the client left before its body arrived: no one to answer
            return None
        finally:
            if not queued:  # before any answer: no batch waits for a refusal's drain
                batcher.left()
        if refusal is not None:
            await fail(*refusal)
            return None
        try:
            return await pending
        except oip.OipError as exc:  # an output the request named that the model lacks
            await fail(exc.status, str(exc))
        except Exception as exc:  # the model failed on this batch: one line, a 500
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            await fail(500, f"{type(exc).__name__}: {line}")
        return None
