"""steps.serve.batcher on its own, with a stand-in model that records each batch's size and
holds it until the test lets it go: which requests a batch takes, decided as the inference
thread decides it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator

import numpy as np

from steps.serve.batcher import Batcher

ONE = np.zeros((1, 32, 32, 3), np.uint8)


class HeldModel:
    """Runs a batch only once the test releases it; returns one row per image."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.gate = threading.Semaphore(0)

    def __call__(self, images: np.ndarray) -> list[int]:
        self.sizes.append(len(images))
        assert self.gate.acquire(timeout=30), "the test never released this batch"
        return list(range(len(images)))


@contextlib.asynccontextmanager
async def started(model: HeldModel, max_delay_s: float) -> AsyncIterator[Batcher]:
    """A running Batcher over ``model``; at the end every batch still held is let go (a
    failed assertion must not leave the inference thread waiting) and the thread stopped."""
    batcher = Batcher(model, max_batch=64, max_delay_s=max_delay_s).start()
    try:
        yield batcher
    finally:
        model.gate.release(64)
        batcher.stop()


async def until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_a_batch_takes_at_most_half_the_requests_held() -> None:
    """32 closed-loop clients: one request running, 23 queued, 8 arriving. The next batch
    takes 16 of the 23 queued (half of the 32 held), not all 23; the 7 left make the one
    after. Without the cap the clients settle into batches of 8 and 24 by turns."""
    model = HeldModel()

    async def main() -> None:
        async with started(model, max_delay_s=0.0) as batcher:
            batcher.arrive()
            first = batcher.enqueue(ONE, list)
            await until(lambda: model.sizes == [1])  # running, held by the test
            for _ in range(31):
                batcher.arrive()
            queued = [batcher.enqueue(ONE, list) for _ in range(23)]
            assert batcher.held == 32 and batcher.arriving == 8
            model.gate.release()
            await until(lambda: len(model.sizes) == 2)
            assert model.sizes == [1, 16]
            assert await first == [0]
            model.gate.release()
            await until(lambda: len(model.sizes) == 3)
            assert model.sizes == [1, 16, 7]  # the rest queued; the 8 still arriving
            assert [await f for f in queued[:16]] == [[i] for i in range(16)]
            for _ in range(8):
                batcher.left()  # the 8 on their way are refused
            model.gate.release()
            assert [await f for f in queued[16:]] == [[i] for i in range(7)]
            await asyncio.sleep(0)  # the answers' callbacks
            assert batcher.held == 0 and batcher.arriving == 0

    asyncio.run(main())


def test_two_held_requests_still_batch_together() -> None:
    """The cap is never below two: a request with one other on its way waits for it (up to
    the delay), as Triton's delay does, and both run as one batch."""
    model = HeldModel()
    model.gate.release()

    async def main() -> None:
        async with started(model, max_delay_s=5.0) as batcher:
            batcher.arrive()
            batcher.arrive()
            first = batcher.enqueue(ONE, list)
            await asyncio.sleep(0.1)
            assert model.sizes == []  # waiting for the one on its way
            second = batcher.enqueue(ONE, list)
            assert await asyncio.gather(first, second) == [[0], [1]]
            assert model.sizes == [2]

    asyncio.run(main())


def test_a_cancelled_request_is_no_longer_held() -> None:
    """A client that goes away cancels its request: it stops counting towards the cap."""
    model = HeldModel()

    async def main() -> None:
        async with started(model, max_delay_s=0.0) as batcher:
            batcher.arrive()
            running = batcher.enqueue(ONE, list)
            await until(lambda: model.sizes == [1])
            batcher.arrive()
            gone = batcher.enqueue(ONE, list)
            gone.cancel()
            await asyncio.sleep(0)
            assert batcher.held == 1
            model.gate.release()
            model.gate.release()
            assert await running == [0]

    asyncio.run(main())
