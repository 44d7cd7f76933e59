"""Progress output for long transfers: a rich bar on a terminal, plain lines in pod logs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

MB = 1024 * 1024


def human_mb(nbytes: float) -> str:
    return f"{nbytes / MB:,.1f} MB"


@contextmanager
def transfer(
    console: Console, description: str, total: int | None
) -> Iterator[Callable[[int], None]]:
    """Yield a thread-safe ``advance(nbytes)`` callback (boto3 calls it from its threads).

    On a terminal it drives a rich bar; elsewhere (Argo pod logs, CI) it prints one line
    at the start and one with size and throughput at the end.
    """
    start = time.perf_counter()
    lock = threading.Lock()
    done = 0
    if console.is_terminal:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task(description, total=total)

            def advance_bar(nbytes: int) -> None:
                nonlocal done
                with lock:
                    done += nbytes
                    progress.update(task, advance=nbytes)

            yield advance_bar
    else:
        console.print(f"{description} ({human_mb(total) if total else 'size unknown'}) ...")

        def advance_count(nbytes: int) -> None:
            nonlocal done
            with lock:
                done += nbytes

        yield advance_count
    seconds = max(time.perf_counter() - start, 1e-9)
    console.print(
        f"{description}: {human_mb(done)} in {seconds:.2f} s ({done / MB / seconds:,.1f} MB/s)"
    )
