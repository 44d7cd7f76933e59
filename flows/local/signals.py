"""How a local run is stopped: SIGINT, SIGTERM and SIGHUP each end it as ``argo stop`` does.

Argo's Stop strategy (``argo stop``; ``argo terminate`` is the one that skips the exit
handler) marks the running nodes Failed with the message "Stopped with strategy 'Stop'",
ends the workflow Failed and still runs the exit handler with ``{{workflow.status}}`` =
Failed. The runner installs its own handlers while it runs, whatever it inherited (a
background job of a script inherits SIGINT ignored, and Python's default SIGTERM/SIGHUP
action kills the runner before it can stop its tasks), and restores the previous ones after.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

STOP_MESSAGE = "Stopped with strategy 'Stop'"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class RunStopped(KeyboardInterrupt):
    """The run was stopped by a signal; ``exit_code`` is the shell's 128 + signal number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.signal_name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def as_stop(exc: KeyboardInterrupt) -> RunStopped:
    """A plain KeyboardInterrupt (handlers not installed: not the main thread) is SIGINT."""
    return exc if isinstance(exc, RunStopped) else RunStopped(signal.SIGINT)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise RunStopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Raise ``RunStopped`` in the main thread on SIGINT/SIGTERM/SIGHUP; restore after."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _raise_stop)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
