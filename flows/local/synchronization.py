"""``spec.synchronization.mutexes`` between the local runs of one machine, as Argo's
controller holds a workflow-level mutex (argo-workflows v4.0.5 workflow/controller/
operator.go ``operate``: ``TryAcquire`` before anything runs; while another workflow holds
it the workflow is Pending with the lock's message, workflow/sync/semaphore.go
``checkAcquire``; released once the workflow is fulfilled, its exit handler included). The
lock's name is Argo's ``<namespace>/Mutex/<name>`` (workflow/sync/lock_name.go).

Here a lock is an ``flock`` on one file per lock name under the lock directory
(``$CIFAR_CACHE_DIR/locks``, else ~/.cache/cifar-pipeline/locks): the kernel lets go of it
when the holding process ends however it ends, so a killed run never leaves it held. A
waiting run polls, so a stop (a signal, ``Event``) ends its wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from flows.local.status import file_name

POLL_S = 0.2  # between tries of a held lock: a waiting run notices its turn this fast


def default_lock_dir() -> Path:
    base = os.environ.get("CIFAR_CACHE_DIR") or Path.home() / ".cache" / "cifar-pipeline"
    return Path(base) / "locks"


def mutex_names(spec: Mapping[str, Any], namespace: str) -> list[str]:
    """The workflow's mutexes by Argo's lock name, ``<namespace>/Mutex/<name>`` (the
    mutex's own namespace, else the workflow's), sorted: every run takes them in one
    order, so two runs never hold one each and wait for the other's."""
    mutexes = (spec.get("synchronization") or {}).get("mutexes") or []
    return sorted({f"{m.get('namespace') or namespace}/Mutex/{m['name']}" for m in mutexes})


@contextlib.contextmanager
def held(
    names: list[str],
    lock_dir: Path,
    stopping: threading.Event,
    waiting: Callable[[str], None],
) -> Iterator[None]:
    """Hold every lock of ``names`` for the block; ``waiting(message)`` once per lock
    another run holds (Argo's message), then again with "" once it is taken."""
    files = []
    try:
        for name in names:
            lock_dir.mkdir(parents=True, exist_ok=True)
            handle = open(lock_dir / f"{file_name(name)}.lock", "a")  # noqa: SIM115
            files.append(handle)
            told = False
            while not _try_lock(handle):
                if not told:
                    waiting(f"Waiting for {name} lock. Lock status: 0/1")
                    told = True
                if stopping.wait(POLL_S):  # stopped while Pending: as a signal would
                    raise KeyboardInterrupt
            if told:
                waiting("")
        yield
    finally:
        for handle in reversed(files):
            handle.close()  # closing the file lets go of its lock


def _try_lock(handle: Any) -> bool:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
