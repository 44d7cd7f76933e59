"""The champion's endpoint under load, beside in-process inference of the same pyfunc and
beside ``mlflow models serve`` of it: what HTTP costs, as numbers.

    python benchmarks/serving.py [--model URI] [--seconds 3] [--rounds 3] [--concurrency 1 8 32]
        [--threads 2] [--no-peer] [--set serving.max_delay_ms=2 ...]

Without ``--model`` it stages a synthetic dataset, trains a ResNet-9 for a few SGD steps,
optimizes it (ONNX Runtime and OpenVINO, FP32 and INT8) and lets ``steps.benchmark``
register the champion pyfunc in a temporary SQLite MLflow store; with ``--model`` (e.g.
``models:/cifar10-classifier@champion``, ``MLFLOW_TRACKING_URI`` set) it serves that one.
In process: ``model.predict`` of one image (p50, p99) and of 32 (images/s). Then each
server on 127.0.0.1 (``python -m steps.serve``, ``mlflow models serve -w 1``), loaded by
closed-loop clients (threads, one keep-alive connection each, one image per request) at
each concurrency for ``--seconds`` after a warm-up: requests/s, p50, p99, and the CPU
time an image took (the server's process and its children; in process, this one's).
Every row is measured once a round, by turns, for ``--rounds`` rounds; the table holds
medians.
Last, the server's read of one request body, its fast path beside MLflow's. Targets (issue
22): at concurrency 1 the endpoint adds at most 1 ms to the in-process p50 of one image; at
concurrency 32 it serves at least half the in-process images/s of batch 32.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import numpy as np  # noqa: E402

from steps.common.serving.client import ServingClient, request_body  # noqa: E402
from tests.servers import free_port  # noqa: E402

NAME = "cifar10-classifier"


def build_champion(tmp: Path, threads: int, train_steps: int) -> str:
    """A briefly trained ResNet-9's champion pyfunc in a SQLite store under ``tmp``."""
    from inference import trained_briefly, untrained_model

    from steps.benchmark import step as benchmark
    from steps.optimize import step as optimize

    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlflow.db'}"
    model, dataset = untrained_model(tmp, 64)
    trained_briefly(model, dataset, train_steps)
    overrides = [
        "optimize.variants=[onnx, openvino]",
        f"optimize.cpu_threads={threads}",
        "optimize.parity_samples=64",
        "benchmark.batch_sizes=[1, 8, 32, 64]",
        # Three rounds, medians: which variant serves each batch size is decided here, and
        # one round on a busy machine can hand batch 1 to the slower runtime.
        "benchmark.rounds=3",
        "benchmark.time_budget_s=0.3",
        "benchmark.warmup_s=0.1",
        f"benchmark.registered_model={NAME}",
    ]
    common = dict(config=None, overrides=overrides, mlflow_run_id=None, debug=False)
    opt = str(tmp / "opt")
    optimize.run(
        argparse.Namespace(model=model, dataset=dataset, output=opt, outputs_dir=None, **common)
    )
    benchmark.run(
        argparse.Namespace(
            model=model,
            optimized=opt,
            dataset=dataset,
            output=str(tmp / "report"),
            outputs_dir=None,
            **common,
        )
    )
    return f"models:/{NAME}@champion"


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def in_process(model: Any, images: np.ndarray, seconds: float) -> dict[str, tuple]:
    """``model.predict`` of one image and of 32, as the server calls it: the rows
    ``(concurrency, images/s, p50 ms, p99 ms, errors, CPU ms an image)``."""
    rows = {}
    for batch in (1, 32):
        x = images[:batch]
        for _ in range(20):
            model.predict(x)
        times: list[float] = []
        cpu = cpu_seconds(os.getpid())
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            started = time.perf_counter()
            model.predict(x)
            times.append(time.perf_counter() - started)
        cpu_ms = (cpu_seconds(os.getpid()) - cpu) * 1e3 / (batch * len(times))
        p50, p99 = percentiles(times)
        row = ("-", batch / np.median(times), p50, p99, "-", cpu_ms)
        rows[f"in process, model.predict, batch {batch}"] = row
    return rows


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

    def request(self, body: bytes) -> bytes:
        return (
            f"POST /invocations HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
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


def load(url: str, pid: int, bodies: list[bytes], concurrency: int, seconds: float) -> tuple:
    """Closed-loop clients: (requests/s answered 200, p50 ms, p99 ms, errors, the server's
    CPU ms a request) of one-image requests; an error answer is counted, not timed, and the
    client goes on. ``pid``: the server's process (its descendants counted too)."""
    times: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[str] = []
    start = threading.Barrier(concurrency + 1)
    window: dict[str, float] = {"end": float("inf")}

    def client(index: int) -> None:
        c = LoadClient(url)
        requests = [c.request(body) for body in bodies]
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
        except OSError as exc:
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
    command: list[str], url_pattern: str | None, port: int | None
) -> Iterator[tuple[str, int]]:
    """A server subprocess, until it answers /ping; its URL and pid."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    # mlflow execs uvicorn by name: the venv's bin on PATH, as when it is activated.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in the finally below)
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}" if port else ""
        deadline = time.monotonic() + 180
        while not url:
            log.seek(0)
            found = re.search(url_pattern or "", log.read())
            url = found.group(1) if found else ""
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"{command[:4]} did not start:\n{log.read()[-2000:]}")
            time.sleep(0.2)
        with ServingClient(url) as client:
            client.wait_ready(180, path="/ping")
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="the pyfunc to serve (default: a briefly trained one)")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per row")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every row, by turns")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--threads", type=int, default=2, help="ORT/OpenVINO threads")
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--no-peer", action="store_true", help="skip mlflow models serve")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    import mlflow

    with tempfile.TemporaryDirectory(prefix="serving-bench-") as tmp:
        uri = args.model or build_champion(Path(tmp), args.threads, args.train_steps)
        images = np.random.default_rng(0).integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
        bodies = [request_body(images[i : i + 1]) for i in range(len(images))]
        ours = [sys.executable, "-m", "steps.serve", "--model-uri", uri, "--port", "0"]
        ours += [x for o in args.overrides for x in ("--set", o)]
        servers = [("python -m steps.serve", ours, r"on (http://\S+) \(POST", None)]
        if not args.no_peer:
            port = free_port()
            peer = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri]
            peer += ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"]
            servers.append(("mlflow models serve -w 1", peer, None, port))
        with contextlib.ExitStack() as running:
            urls = {name: running.enter_context(server(*rest)) for name, *rest in servers}
            model = mlflow.pyfunc.load_model(uri)
            # Every row once a round, by turns: a change in the machine's load (other
            # processes on its cores) falls on all rows alike, and medians take the rest.
            rounds: list[dict[str, tuple]] = []
            for number in range(1, args.rounds + 1):
                rows = in_process(model, images, args.seconds)
                for name, (url, pid) in urls.items():
                    for concurrency in args.concurrency:
                        measured = load(url, pid, bodies, concurrency, args.seconds)
                        rows[f"{name}, concurrency {concurrency}"] = (concurrency, *measured)
                print(f"round {number}/{args.rounds} done", file=sys.stderr, flush=True)
                rounds.append(rows)
            parsing = parse_times(model, bodies[0])
    report(rounds, args)
    print("\n| reading a one-image body | median us | vs MLflow's path |")
    print("| --- | --- | --- |")
    for name, micros in parsing.items():
        print(
            f"| {name} | {micros:.0f} | {parsing['json.loads + MLflow conversion'] / micros:.2f}x |"
        )


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


def cpu_name() -> str:
    """The CPU's model name, as ``lscpu`` prints it."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def report(rounds: list[dict[str, tuple]], args: argparse.Namespace) -> None:
    """The median of each number over the rounds; the targets, per round and their median."""
    print(
        f"\n{cpu_name()}, {os.cpu_count()} CPUs, load average "
        f"{[round(v, 2) for v in os.getloadavg()]}; {len(rounds)} rounds of {args.seconds:g} s "
        "a row, by turns; medians over the rounds; one image a request"
    )
    print("| what | concurrency | images/s | p50 ms | p99 ms | CPU ms an image | errors |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, (concurrency, *_) in rounds[0].items():
        rate, p50, p99, cpu = (float(np.median([r[name][i] for r in rounds])) for i in (1, 2, 3, 5))
        errors = [r[name][4] for r in rounds if r[name][4] not in ("0", "-")]
        shown = "; ".join(errors) if errors else rounds[0][name][4]
        print(
            f"| {name} | {concurrency} | {rate:,.0f} | {p50:.2f} | {p99:.2f} | {cpu:.2f} "
            f"| {shown} |"
        )
    one, batch = "in process, model.predict, batch 1", "in process, model.predict, batch 32"
    c1, c32 = "python -m steps.serve, concurrency 1", "python -m steps.serve, concurrency 32"
    if c1 in rounds[0]:
        added = [r[c1][2] - r[one][2] for r in rounds]
        median = float(np.median(added))
        print(f"concurrency 1: the endpoint adds {median:.2f} ms to the in-process p50 "
              f"(rounds: {', '.join(f'{a:.2f}' for a in added)}; target <= 1 ms: "
              f"{'met' if median <= 1 else 'missed'})")  # fmt: skip
    if c32 in rounds[0]:
        ratios = [r[c32][1] / r[batch][1] for r in rounds]
        median = float(np.median(ratios))
        print(f"concurrency 32: {median:.2f} of the in-process images/s at batch 32 "
              f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)}; target >= 0.5: "
              f"{'met' if median >= 0.5 else 'missed'})")  # fmt: skip


if __name__ == "__main__":
    main()
