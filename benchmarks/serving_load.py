"""The load generator of ``benchmarks/serving.py``: closed-loop clients on keep-alive
connections posting ready-made requests, the server's CPU time, a server subprocess until
it answers; and the in-process rows it is measured against.

A route is what a row posts: a path, its headers and one body per image (MLflow's
``/invocations``, the Open Inference Protocol with binary or JSON tensors), so every
server is loaded the same way whatever protocol it speaks.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from steps.common.serving.client import ServingClient, oip_request, request_body

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Route:
    path: str
    headers: tuple[tuple[str, str], ...]
    bodies: tuple[bytes, ...]  # one one-image request per image, by turns


def invocations(images: np.ndarray) -> Route:
    bodies = tuple(request_body(images[i : i + 1]) for i in range(len(images)))
    return Route("/invocations", (("Content-Type", "application/json"),), bodies)


def inference(model: str, images: np.ndarray, binary: bool, input_name: str = "images") -> Route:
    """``POST /v2/models/<model>/infer`` of one image a request; binary: its bytes after
    the header and the outputs back as bytes."""
    bodies, headers = [], {}
    for i in range(len(images)):
        body, headers = oip_request(images[i : i + 1], binary)
        if input_name != "images":  # MLServer names a signature's unnamed input input-0
            body = body.replace(b'"name":"images"', f'"name":"{input_name}"'.encode(), 1)
        bodies.append(body)
    return Route(f"/v2/models/{model}/infer", tuple(headers.items()), tuple(bodies))


class LoadClient:
    """One keep-alive connection posting ready-made requests: the request's bytes are built
    once and the answer read by its Content-Length, so the load generator, which shares the
    machine's cores with the server, spends microseconds a request (``http.client`` parses
    each answer's headers with ``email.parser``: several times the server's own cost)."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host = f"{parts.hostname}:{parts.port}"
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def request(self, route: Route, body: bytes) -> bytes:
        headers = "".join(f"{name}: {value}\r\n" for name, value in route.headers)
        return (
            f"POST {route.path} HTTP/1.1\r\nHost: {self.host}\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    def post(self, request: bytes) -> int:
        """Send one ready request; the answer's status (its body read and dropped)."""
        self.sock.sendall(request)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self.buffer += self._receive()
        head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
        status = int(head[9:12])
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        while len(self.buffer) < length:
            self.buffer += self._receive()
        self.buffer = self.buffer[length:]
        return status

    def _receive(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        return data

    def close(self) -> None:
        self.sock.close()


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process and all its descendants so far."""
    import psutil

    process = psutil.Process(pid)
    total = 0.0
    for each in (process, *process.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):
            times = each.cpu_times()
            total += times.user + times.system
    return total


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def load(url: str, pid: int, route: Route, concurrency: int, seconds: float) -> tuple:
    """Closed-loop clients: (requests/s answered 200, p50 ms, p99 ms, errors, the server's
    CPU ms a request) of one-image requests; an error answer is counted, not timed, and the
    client goes on. ``pid``: the server's process (its descendants counted too)."""
    times: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[str] = []
    start = threading.Barrier(concurrency + 1)
    window: dict[str, float] = {"end": float("inf")}

    def client(index: int) -> None:
        c = LoadClient(url)
        requests = [c.request(route, body) for body in route.bodies]
        try:
            for i in range(10):  # warm-up: connection and the server's first calls
                c.post(requests[i % len(requests)])
            start.wait(timeout=300)
            i = index
            while time.perf_counter() < window["end"]:
                started = time.perf_counter()
                status = c.post(requests[i % len(requests)])
                if status == 200:
                    times[index].append(time.perf_counter() - started)
                else:
                    errors.append(f"HTTP {status}")
                i += 1
        except (OSError, threading.BrokenBarrierError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    start.wait(timeout=300)
    cpu = cpu_seconds(pid)
    began = time.perf_counter()
    window["end"] = began + seconds
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    cpu_ms = (cpu_seconds(pid) - cpu) * 1e3
    flat = [t for per in times for t in per]
    errored = f"{len(errors)} ({errors[0][:100]})" if errors else "0"
    per_request = cpu_ms / len(flat) if flat else float("nan")
    return (len(flat) / elapsed, *percentiles(flat or [float("nan")]), errored, per_request)


@contextlib.contextmanager
def server(
    command: list[str],
    url_pattern: str | None,
    port: int | None,
    env: dict[str, str] | None = None,
    ready: str = "/ping",
) -> Iterator[tuple[str, int]]:
    """A server subprocess, until ``ready`` answers 200; its URL and pid."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    # mlflow execs uvicorn by name: the venv's bin on PATH, as when it is activated.
    bin_dir = Path(command[0]).parent if "/" in command[0] else Path(sys.executable).parent
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in the finally below)
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}" if port else ""
        deadline = time.monotonic() + 300
        while not url:
            log.seek(0)
            found = re.search(url_pattern or "", log.read())
            url = found.group(1) if found else ""
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"{command[:4]} did not start:\n{log.read()[-2000:]}")
            time.sleep(0.2)
        with ServingClient(url) as client:
            try:
                client.wait_ready(300, path=ready)
            except Exception:
                log.seek(0)
                raise RuntimeError(f"{command[:4]} never ready:\n{log.read()[-2000:]}") from None
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def in_process(model: Any, images: np.ndarray, seconds: float) -> dict[str, tuple]:
    """``model.predict`` of one image and of 32, and the champion's ``predict_columns`` (what
    ``python -m steps.serve`` calls: the same arrays without the DataFrame) where it has
    one, by turns: the rows ``(concurrency, images/s, p50 ms, p99 ms, errors, CPU ms an
    image)``."""
    from steps.serve.predictor import columns_call

    calls = {"model.predict": model.predict}
    columns = columns_call(model)
    if columns is not None:
        calls["predict_columns"] = columns
    rows = {}
    for batch in (1, 32):
        x = images[:batch]
        for name, call in calls.items():
            for _ in range(20):
                call(x)
            times: list[float] = []
            cpu = cpu_seconds(os.getpid())
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                started = time.perf_counter()
                call(x)
                times.append(time.perf_counter() - started)
            cpu_ms = (cpu_seconds(os.getpid()) - cpu) * 1e3 / (batch * len(times))
            p50, p99 = percentiles(times)
            row = ("-", batch / np.median(times), p50, p99, "-", cpu_ms)
            rows[f"in process, {name}, batch {batch}"] = row
    return rows


def parse_times(model: Any, body: bytes, repeat: int = 2000) -> dict[str, float]:
    """The server's read of one request body: its fast path (``steps.serve.pixels``) and
    MLflow's (``json.loads`` and ``convert_data_type``), by turns; median microseconds."""
    from steps.serve.predictor import Predictor

    fast, standard = Predictor(model, 1024), Predictor(model, 1024)
    standard.pixels = None
    paths = {"steps.serve.pixels": fast.parse, "json.loads + MLflow conversion": standard.parse}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeat):
        for name, parse in paths.items():
            started = time.perf_counter()
            parse(body)
            times[name].append(time.perf_counter() - started)
    return {name: float(np.median(t)) * 1e6 for name, t in times.items()}
