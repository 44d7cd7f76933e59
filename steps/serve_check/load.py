"""The test images sent at one concurrency: each worker thread takes the next batch, posts
it and records the request's latency, until every batch is answered or the time limit
passes. Accuracy over the images sent; p50/p99 request latency; requests/s and images/s
over the wall time of the whole pass."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from steps.common.contracts.serve_check import ConcurrencyResult
from steps.common.dataset import NUM_CLASSES
from steps.serve_check.http import BadAnswer, Endpoint, Request


class TimedOut(RuntimeError):
    """The pass did not finish within the check's time limit."""


@dataclass
class Batches:
    """The check's requests (uint8 images, a batch each, and their labels), encoded once
    for the endpoint's protocol (``encode_for``) and sent at every concurrency."""

    images_by_request: list[np.ndarray]
    labels: list[np.ndarray]
    requests: list[Request] = field(default_factory=list)

    def encode_for(self, endpoint: Endpoint) -> None:
        self.requests = [endpoint.encode(images) for images in self.images_by_request]

    @property
    def images(self) -> int:
        return sum(len(labels) for labels in self.labels)


def measure(
    endpoint: Endpoint, batches: Batches, concurrency: int, deadline: float
) -> ConcurrencyResult:
    """One pass over ``batches`` with ``concurrency`` clients; stops at ``deadline``
    (``time.monotonic()``), raising TimedOut. Raises the first request's failure."""
    latencies = [0.0] * len(batches.requests)
    correct = [0] * len(batches.requests)
    cursor = iter(range(len(batches.requests)))
    lock = threading.Lock()
    failed = threading.Event()

    def worker() -> None:
        try:
            while not failed.is_set():
                with lock:
                    index = next(cursor, None)
                if index is None:
                    return
                if time.monotonic() > deadline:
                    raise TimedOut(f"at concurrency {concurrency}, batch {index}")
                labels = batches.labels[index]
                began = time.perf_counter()
                classes = endpoint.classify(batches.requests[index], len(labels))
                latencies[index] = time.perf_counter() - began
                got = np.asarray(classes)
                if got.dtype.kind not in "iu" or got.min() < 0 or got.max() >= NUM_CLASSES:
                    raise BadAnswer(f"classes outside 0..{NUM_CLASSES - 1}: {sorted(set(classes))}")
                correct[index] = int((got == labels).sum())
        except BaseException:
            failed.set()  # the others stop at their next batch
            raise
        finally:
            endpoint.close()

    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency, thread_name_prefix="serve-check") as pool:
        futures = [pool.submit(worker) for _ in range(concurrency)]
    seconds = time.perf_counter() - began
    for future in futures:
        future.result()  # the first failure, as raised in its worker
    ms = np.asarray(latencies) * 1000
    return ConcurrencyResult(
        concurrency=concurrency,
        requests=len(ms),
        images=batches.images,
        accuracy=sum(correct) / batches.images,
        p50_ms=float(np.percentile(ms, 50)),
        p99_ms=float(np.percentile(ms, 99)),
        requests_per_s=len(ms) / seconds,
        images_per_s=batches.images / seconds,
        seconds=round(seconds, 3),
    )
