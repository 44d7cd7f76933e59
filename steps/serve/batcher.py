"""Dynamic batching, as Triton's dynamic batcher does it: requests that arrive together run
as one model call, on one inference thread.

A request joins the queue only once it is valid (the server checks it first), so a bad
request never fails a batch. The inference thread takes the oldest request, then every
queued one that still fits in ``max_batch`` images; it waits for more only while other
requests are on their way in (``arriving``: received, not yet queued) and never longer
than ``max_delay_s`` after the oldest one was queued (Triton's
``max_queue_delay_microseconds``). A request alone is therefore run at once: batching
costs a lone client nothing, and under load the requests that came in during one call
make up the next. A request larger than ``max_batch`` runs alone, whole. Each request
gets exactly its own rows back; a model failure fails that batch's requests, each with
the error.

A batch also takes at most half of the requests the server holds (received and not yet
answered; at least two): a two-stage pipeline, as double buffering. While the model runs
one half, the event loop answers the batch before and reads the other half in, so neither
stage waits on the other. Taking every queued request instead lets closed-loop clients
settle into uneven halves (at concurrency 32, batches of 8 and 24 alternating), where the
small batch leaves the model waiting for the event loop to read the large one; on the
cores they share, the model's threads then lose time to it (``benchmarks/serving.py``
at concurrency 32 on two cores: 5 to 12% more images/s for 4 to 10% less CPU an image).

A request of at most ``inline_images`` images that arrives while the server holds no other
(none queued, running or on its way in) is run at once on the event loop's thread: a lone
client then pays no handoff to the inference thread and back (0.1 ms of a 1.3 ms request
at concurrency 1 on two cores, ``benchmarks/serving.py``). It holds the event loop for one
model call of those few images, which no other request was waiting for; 0 turns it off.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The model runs a batch of images and returns one result per image, in order.
BatchFn = Callable[[np.ndarray], Sequence[Any]]
# What a request gets back: its own results, turned into the response by ``finish``.
FinishFn = Callable[[Sequence[Any]], Any]


_WAKE = object()  # put when a request stops arriving without being queued
_EMPTY = object()


@dataclass
class Job:
    images: np.ndarray
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    finish: FinishFn
    queued: float = field(default_factory=time.monotonic)


class Batcher:
    def __init__(
        self, run: BatchFn, max_batch: int, max_delay_s: float, inline_images: int = 0
    ) -> None:
        self.run = run
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        self.inline_images = inline_images
        self.arriving = 0  # requests received and not yet queued (or refused)
        self.held = 0  # requests received and not yet answered (or refused)
        self.pending = 0  # jobs queued or in a batch that has not finished
        self.inline = 0  # requests run on the event loop's thread
        self.calls = 0
        self.sizes: Counter[int] = Counter()  # images per model call -> how many calls
        self._queue: queue.SimpleQueue[Job | object | None] = queue.SimpleQueue()
        # Held while a request stops arriving and is queued, and while the inference thread
        # looks at both: it never sees a request in neither place.
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="inference", daemon=True)

    def start(self) -> Batcher:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Finish what is queued, then end the inference thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)

    def arrive(self) -> None:
        """A request is on its way in: a batch may wait for it (up to the delay)."""
        with self._lock:
            self.arriving += 1
            self.held += 1

    def left(self) -> None:
        """An arriving request was refused: no batch waits for it any longer."""
        with self._lock:
            self.arriving -= 1
            self.held -= 1
            self._queue.put(_WAKE)

    def enqueue(self, images: np.ndarray, finish: FinishFn) -> asyncio.Future:
        """Queue an arrived request's ``images`` (on the event loop's thread); the future
        is ``finish(results)`` once their batch ran (``finish`` runs on the inference
        thread, so a response is encoded there and not on the event loop). A lone request
        of at most ``inline_images`` images is run here instead: its future is done."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        future.add_done_callback(self._answered)  # answered, failed or cancelled
        with self._lock:
            self.arriving -= 1
            alone = self.held == 1 and self.pending == 0
            if not alone or len(images) > self.inline_images:
                self.pending += 1
                self._queue.put(Job(images, future, loop, finish))
                return future
        self.inline += 1
        value, error = self._call(images, finish)
        _settle(future, value, error)
        return future

    def _call(self, images: np.ndarray, finish: FinishFn) -> tuple[Any, Exception | None]:
        """One request run alone: ``finish(results)``, or the error."""
        try:
            return finish(self._model(images)[0 : len(images)]), None
        except Exception as exc:
            return None, exc

    def _model(self, images: np.ndarray) -> Sequence[Any]:
        """One model call, counted; its rows, one per image."""
        self.calls += 1
        self.sizes[len(images)] += 1
        results = self.run(images)
        if len(results) != len(images):
            raise RuntimeError(f"the model returned {len(results)} rows for {len(images)}")
        return results

    def _answered(self, _future: asyncio.Future) -> None:
        with self._lock:
            self.held -= 1

    def _most_requests(self) -> int:
        """How many requests the next batch may take: half of those held, at least two."""
        with self._lock:
            held = self.held
        return max(2, -(-held // 2))

    def _collect(self, first: Job) -> tuple[list[Job], Job | None, bool]:
        """The batch that starts with ``first``; the job that did not fit (first of the
        next batch); whether a stop was asked for."""
        jobs, count = [first], len(first.images)
        deadline = first.queued + self.max_delay_s
        most = self._most_requests()
        while count < self.max_batch and len(jobs) < most:
            with self._lock:
                try:
                    job, alone = self._queue.get_nowait(), False
                except queue.Empty:
                    job, alone = _EMPTY, self.arriving <= 0
            if job is _WAKE:
                continue
            if job is _EMPTY:
                remaining = deadline - time.monotonic()
                if alone or remaining <= 0:
                    break  # no company on its way, or waited long enough
                try:
                    job = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
                if job is _WAKE:  # one on its way was refused: look again
                    continue
            if job is None:
                return jobs, None, True
            if count + len(job.images) > self.max_batch:
                return jobs, job, False
            jobs.append(job)
            count += len(job.images)
        return jobs, None, False

    def _loop(self) -> None:
        carried: Job | None = None
        stopping = False
        while True:
            first = carried if carried is not None else None if stopping else self._queue.get()
            if first is _WAKE:
                continue
            if first is None:
                return
            jobs, carried, asked = self._collect(first)
            stopping = stopping or asked
            self._run_batch(jobs)

    def _ran(self, jobs: list[Job]) -> None:
        """The model is done with ``jobs`` (before their answers are encoded): a lone
        request may be run inline from here on."""
        with self._lock:
            self.pending -= len(jobs)

    def _run_batch(self, jobs: list[Job]) -> None:
        images = jobs[0].images if len(jobs) == 1 else np.concatenate([j.images for j in jobs])
        try:
            results, failure = self._model(images), None
        except Exception as exc:
            results, failure = [], exc
        self._ran(jobs)
        if failure is not None:
            for job in jobs:
                job.loop.call_soon_threadsafe(_settle, job.future, None, failure)
            return
        start = 0
        for job in jobs:
            end = start + len(job.images)
            try:
                value, error = job.finish(results[start:end]), None
            except Exception as exc:
                value, error = None, exc
            job.loop.call_soon_threadsafe(_settle, job.future, value, error)
            start = end


def _settle(future: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if future.done():  # the client went away and its request was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
