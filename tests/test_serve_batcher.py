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


class ThreadModel:
    """Records the thread each call ran on; fails on an image of 255s."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def __call__(self, images: np.ndarray) -> list[int]:
        self.threads.append(threading.current_thread().name)
        if images.max() == 255:
            raise ValueError("the model failed")
        return list(range(len(images)))


def test_a_lone_small_request_runs_on_the_event_loops_thread() -> None:
    """Held alone, with nothing queued or running, a request of at most ``inline_images``
    images is run by ``enqueue`` itself: its future is done when enqueue returns, and it is
    counted as a model call. A model failure there fails that request alone."""
    model = ThreadModel()

    async def main() -> None:
        batcher = Batcher(model, max_batch=64, max_delay_s=0.0, inline_images=2).start()
        try:
            for images in (ONE, np.zeros((2, 32, 32, 3), np.uint8)):
                batcher.arrive()
                future = batcher.enqueue(images, list)
                assert future.done() and future.result() == list(range(len(images)))
                await asyncio.sleep(0)  # the answer's callback
                assert batcher.held == 0 and batcher.pending == 0
            batcher.arrive()
            failed = batcher.enqueue(np.full((1, 32, 32, 3), 255, np.uint8), list)
            assert isinstance(failed.exception(), ValueError)
            await asyncio.sleep(0)
            assert batcher.held == 0
        finally:
            batcher.stop()
        main_thread = threading.current_thread().name
        assert model.threads == [main_thread] * 3
        assert (batcher.calls, batcher.inline, dict(batcher.sizes)) == (3, 3, {1: 2, 2: 1})

    asyncio.run(main())


def test_a_request_with_company_or_too_many_images_goes_to_the_inference_thread() -> None:
    """Not inline: a request of more than ``inline_images`` images; one with another on its
    way in; one that arrives while a batch runs (and one queued after it); any request
    when ``inline_images`` is 0."""
    model = HeldModel()
    two = np.zeros((2, 32, 32, 3), np.uint8)

    async def main() -> None:
        async with started(model, max_delay_s=0.0) as batcher:
            batcher.inline_images = 1
            batcher.arrive()
            large = batcher.enqueue(two, list)  # two images: the inference thread's
            await until(lambda: model.sizes == [2])
            batcher.arrive()
            during = batcher.enqueue(ONE, list)  # a batch is running
            assert not during.done()
            model.gate.release(2)
            assert await large == [0, 1] and await during == [0]
            batcher.arrive()
            batcher.arrive()  # a second on its way in: company to wait for
            first = batcher.enqueue(ONE, list)
            second = batcher.enqueue(ONE, list)
            model.gate.release()
            assert await asyncio.gather(first, second) == [[0], [1]]
            batcher.inline_images = 0
            batcher.arrive()
            off = batcher.enqueue(ONE, list)
            assert not off.done()
            model.gate.release()
            assert await off == [0]
            assert model.sizes == [2, 1, 2, 1] and batcher.inline == 0

    asyncio.run(main())
