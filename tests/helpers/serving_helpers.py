"""What the serving tests share: the champion's registered name, ``python -m steps.serve``
run for real on a free port (``serving``), raw HTTP to it, and a predictor pair with and
without the fast pixel path. The champion and its servers are tests/conftest.py's fixtures."""

from __future__ import annotations

import contextlib
import http.client
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from mlflow.models import Model, ModelSignature
from mlflow.types import Schema, TensorSpec

from steps.common.serving import strict_input
from steps.common.serving.client import ServingClient
from steps.serve.predictor import Predictor
from tests.helpers.paths import REPO_ROOT

NAME = "cifar10-classifier"  # the session's champion (conftest.py's ``champion``)
CHAMPION = f"models:/{NAME}@champion"
CIFAR = (-1, 32, 32, 3)  # a uint8 NHWC image batch of any length


@dataclass
class Running:
    url: str
    process: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    @property
    def address(self) -> tuple[str, int]:
        parts = urllib.parse.urlsplit(self.url)
        return parts.hostname or "", parts.port or 0

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=60)
        time.sleep(0.1)  # the reader thread takes the last lines
        return code, "\n".join(self.lines)


@contextlib.contextmanager
def serving(champion: dict, *overrides: str, model: str = CHAMPION) -> Iterator[Running]:
    """``python -m steps.serve`` on a free port, ready; stopped (SIGTERM) at the end."""
    command = [sys.executable, "-m", "steps.serve", "--model-uri", model, "--port", "0"]
    for override in overrides:
        command += ["--set", override]
    env = {**os.environ, "MLFLOW_TRACKING_URI": champion["uri"], "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    first: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            lines.append(line.rstrip("\n"))
            if line.startswith("serving "):
                first.put(line)
        first.put("")

    threading.Thread(target=read, daemon=True).start()
    try:
        line = first.get(timeout=120)
        match = re.fullmatch(
            rf"serving {re.escape(model)} on (http://\S+) \(POST /invocations\)\n", line
        )
        assert match, "\n".join(lines)
        running = Running(match.group(1), process, lines)
        with ServingClient(running.url) as client:
            client.wait_ready(120)
        yield running
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def raw_post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request(
            "POST", "/invocations", body, {"Content-Type": "application/json", **(headers or {})}
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def answer(sock: socket.socket) -> tuple[int, bytes]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    try:
        return response.status, response.read()
    finally:
        sock.close()


def predictors(shape: tuple[int, ...], max_images: int = 8) -> tuple[Predictor, Predictor]:
    """(with the fast path, without it) for a uint8 tensor input of ``shape``."""
    spec = TensorSpec(np.dtype(np.uint8), shape)
    strict_input.install(spec, f"uint8 images of shape {shape}")
    model = SimpleNamespace(metadata=Model(signature=ModelSignature(inputs=Schema([spec]))))
    fast, standard = Predictor(model, max_images), Predictor(model, max_images)
    standard.pixels = None
    assert fast.pixels is not None
    return fast, standard
