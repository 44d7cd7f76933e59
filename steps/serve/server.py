"""The champion's HTTP server: fetch the model, bind the port, answer the probes while it
loads, serve until a stop signal (steps.serve.step is its command line).

``serve_model`` fetches the model's files first (a URI that holds no model is
``ModelNotFound`` before any port is taken), binds, prints where it serves with curl lines
for both protocols, loads the pyfunc in a thread while /v2/health/live already answers,
and returns what it served once SIGINT, SIGTERM or SIGHUP stopped it after the requests in
flight.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from steps.common.config import PipelineConfig
from steps.serve.app import ServingApp
from steps.serve.asgi import Linger
from steps.serve.batcher import Batcher
from steps.serve.predictor import Predictor

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A one-image request a user can paste: python3 writes the JSON, curl posts it (python3, not
# python: a shell without a virtual environment has no python on PATH on many systems).
CURL = (
    "python3 -c 'import json; print(json.dumps({\"inputs\": [[[[0, 0, 0]] * 32] * 32]}))' | "
    "curl -s -H 'Content-Type: application/json' --data-binary @- {url}/invocations"
)
# The same image through the Open Inference Protocol, its 3,072 bytes after the JSON header.
OIP_CURL = (
    "(printf '{header}'; head -c 3072 /dev/zero) | curl -s --data-binary @- "
    "-H 'Inference-Header-Content-Length: {length}' {url}/v2/models/{name}/infer"
)
OIP_HEADER = (
    '{{"inputs":[{{"name":"images","datatype":"UINT8","shape":[1,32,32,3],'
    '"parameters":{{"binary_data_size":3072}}}}]}}'
)


class ServeUsageError(ValueError):
    """What the user passed cannot be served: a bad port (exit 2)."""


class ModelNotFound(ServeUsageError):
    """The model URI holds no MLflow model (exit 2)."""


class ServeError(RuntimeError):
    """The server could not start or the model failed to load (exit 1)."""


@dataclass
class ServeResult:
    url: str
    calls: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelIdentity:
    """What the endpoint serves, as ``GET /v2/models/<name>`` tells it: the registered
    model's name and version (``model`` and none for a URI outside the registry)."""

    name: str = "model"
    version: str | None = None


def fetch_model(uri: str, cfg: PipelineConfig, into: Path) -> tuple[Path, ModelIdentity]:
    """The model's directory here (downloaded unless it is one) and what it is; ModelNotFound
    for a URI that names nothing or something that is not an MLflow model. A registry URI
    (an alias, a stage, latest) is resolved to one version first, and that version is the
    one fetched: the answer to ``/v2/models`` is what was loaded, whatever moves later."""
    from mlflow.artifacts import download_artifacts
    from mlflow.exceptions import MlflowException

    scheme = urllib.parse.urlsplit(uri).scheme  # models:/x has no "//"
    local = Path(uri.removeprefix("file://")) if scheme in ("", "file") else None
    identity = ModelIdentity()
    if local is not None:
        path = local
    else:
        from steps.common.pipeline_run import connect

        connect(cfg.tracking)  # models:/ and runs:/ need the tracking server
        try:
            source = uri
            if scheme == "models":
                identity = registry_identity(uri)
                if identity.version is not None:
                    source = f"models:/{identity.name}/{identity.version}"
            path = Path(download_artifacts(artifact_uri=source, dst_path=str(into)))
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise ModelNotFound(f"--model-uri {uri}: {first_line(exc.message)}") from None
            raise
        except OSError as exc:  # a runs:/ path with no such file in the run's artifacts
            raise ModelNotFound(f"--model-uri {uri}: {first_line(str(exc))}") from None
    if not (path / "MLmodel").is_file():
        raise ModelNotFound(
            f"--model-uri {uri}: no MLflow model there (no MLmodel file); give the champion "
            "pyfunc, e.g. models:/cifar10-classifier@champion"
        )
    return path, identity


def registry_identity(uri: str) -> ModelIdentity:
    """``models:/NAME/VERSION``, ``@ALIAS``, ``/STAGE`` or ``/latest`` as one version, by
    MLflow's own resolution (what ``download_artifacts`` of it would fetch)."""
    import mlflow
    from mlflow.store.artifact.utils.models import get_model_name_and_version

    resolved = get_model_name_and_version(mlflow.MlflowClient(), uri)
    if len(resolved) != 2:  # models:/m-<id>: a logged model, not a registry version
        return ModelIdentity()
    name, version = resolved
    return ModelIdentity(str(name), str(version))


def first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so
    # (base_events._set_nodelay), and without it a response's head and body meet Nagle.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeUsageError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pass another --port"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve_model(uri: str, host: str, port: int, cfg: PipelineConfig) -> ServeResult:
    """Serve ``uri`` on ``host:port`` (0: any free port) until stopped; what it served."""
    with tempfile.TemporaryDirectory(prefix="serve-") as tmp:
        path, identity = fetch_model(uri, cfg, Path(tmp))
        sock = bind(host, port)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{sock.getsockname()[1]}"
        what = f"{identity.name} v{identity.version}" if identity.version else "it"
        print(f"serving {uri} on {url} (POST /invocations)", flush=True)
        print(f"try: {CURL.replace('{url}', url)}", flush=True)
        header = OIP_HEADER.format()
        oip = OIP_CURL.format(header=header, length=len(header), url=url, name=identity.name)
        print(f"or, Open Inference Protocol: {oip}", flush=True)
        print(f"model: {what}; GET {url}/v2/models/{identity.name} says so", flush=True)
        serving = cfg.serving
        # A refused body's rest drained (steps.serve.asgi.refuse); -1: the body bound
        limit = -1 if serving.linger_max_bytes is None else serving.linger_max_bytes
        linger = Linger(limit, serving.linger_time_s, serving.linger_timeout_s)
        app = ServingApp(identity.name, identity.version, linger)
        config = uvicorn.Config(
            app,
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_keep_alive=30,
            timeout_graceful_shutdown=10,
        )
        server = _Server(config)
        failure: list[str] = []
        loader = threading.Thread(
            target=_load, args=(app, path, cfg, server, failure), name="load", daemon=True
        )
        loader.start()
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
            if app.batcher is not None:
                app.batcher.stop()
        if failure:
            raise ServeError(f"{uri}: the model failed to load: {failure[0]}")
        batcher = app.batcher
        result = ServeResult(url)
        if batcher is not None:
            result.calls, result.batch_sizes = batcher.calls, dict(sorted(batcher.sizes.items()))
        images = sum(size * n for size, n in result.batch_sizes.items())
        print(f"stopped: {images} images in {result.calls} model calls", flush=True)
        return result


def _load(
    app: ServingApp, path: Path, cfg: PipelineConfig, server: uvicorn.Server, failure: list[str]
) -> None:
    """Load the pyfunc and start the batcher; on failure stop the server (exit 1)."""
    try:
        import mlflow

        started = time.perf_counter()
        model = mlflow.pyfunc.load_model(str(path))
        serving = cfg.serving
        predictor = Predictor(model, serving.max_request_images)
        batcher = Batcher(
            predictor, serving.max_batch, serving.max_delay_ms / 1000, serving.inline_max_images
        )
        app.loaded(predictor, batcher.start())
        print(f"ready: model loaded in {time.perf_counter() - started:.1f} s", flush=True)
    except Exception as exc:
        failure.append(f"{type(exc).__name__}: {first_line(str(exc))}")
        server.should_exit = True


class _Server(uvicorn.Server):
    """uvicorn's Server, stopped by SIGINT, SIGTERM or SIGHUP without raising the signal
    again afterwards as uvicorn's own ``capture_signals`` does: ``serve`` then reports and
    the step exits 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
