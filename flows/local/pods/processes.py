"""Task handlers: what starts a task's process and waits for it. ``SubprocessHandler`` runs
each in its own process group, streaming its output to the task's log, and stops it at
its deadline or on an interrupt; tests may swap in their own ``TaskHandler``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import psutil


@dataclass
class ProcessSpec:
    """One process to start: what a pod's main container would run."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    deadline_s: float | None = None
    path_map: dict[str, Path] = field(default_factory=dict)  # declared output -> local path
    stdout_path: Path | None = None  # stdout alone is kept here too: Argo's outputs.result


class TaskHandler(Protocol):
    def run(self, spec: ProcessSpec, log: Path, tail: deque[str]) -> int: ...
    def interrupt(self) -> None: ...  # stop every running process; start none after
    def reset(self) -> None: ...  # start processes again (the exit handler's, after a stop)
    def start_service(self, spec: ProcessSpec, sink: IO[bytes]) -> subprocess.Popen: ...


class SubprocessHandler:
    """Runs each process in its own process group, streaming its output to the log."""

    def __init__(self) -> None:
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stopped = False  # set by interrupt(): a process started after it is killed

    def reset(self) -> None:
        """Allow new processes again after ``interrupt`` (the exit handler's)."""
        self._stopped = False

    def run(self, spec: ProcessSpec, log: Path, tail: deque[str]) -> int:
        log.parent.mkdir(parents=True, exist_ok=True)
        stdout = open(spec.stdout_path, "wb") if spec.stdout_path else None  # noqa: SIM115
        with open(log, "ab") as sink, stdout or contextlib.nullcontext():
            process = subprocess.Popen(
                spec.argv,
                cwd=spec.cwd,
                env=spec.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if stdout else subprocess.STDOUT,
                start_new_session=True,
            )
            lines = threading.Lock()

            def copy(stream: IO[bytes], keep: IO[bytes] | None) -> None:
                for line in iter(stream.readline, b""):
                    with lines:
                        sink.write(line)
                        sink.flush()
                        if keep:
                            keep.write(line)
                        tail.append(line.decode(errors="replace").rstrip())

            # stderr goes to the log only; read on its own thread so neither pipe fills
            errors = threading.Thread(target=copy, args=(process.stderr, None), daemon=True)
            if stdout:
                errors.start()
            with self._lock:
                self._running.add(process)
                late = self._stopped
            if late:  # started while the run was being stopped
                self._kill(process)
            expired = threading.Event()

            def on_deadline() -> None:
                expired.set()
                self._kill(process)

            timer = threading.Timer(spec.deadline_s, on_deadline) if spec.deadline_s else None
            if timer:
                timer.start()
            try:
                assert process.stdout is not None
                copy(process.stdout, stdout)
                code = process.wait()
                if stdout:
                    errors.join()
            except BaseException:  # a signal in this (main) thread: the process goes too
                self._kill(process)
                raise
            finally:
                if timer:
                    timer.cancel()
                with self._lock:
                    self._running.discard(process)
            if expired.is_set():
                message = f"killed: activeDeadlineSeconds {spec.deadline_s:g} s passed"
                tail.append(message)
                sink.write(f"{message}\n".encode())
            return code

    def start_service(self, spec: ProcessSpec, sink: IO[bytes]) -> subprocess.Popen:
        """An InferenceService's server, which outlives its node
        (``flows.local.pods.services``): started here so a test's handler may start it
        otherwise."""
        return start_process(spec, sink)

    @staticmethod
    def _kill(process: subprocess.Popen) -> None:
        """SIGTERM the task's process group, SIGKILL it after 10 s, then SIGKILL every
        descendant seen: torchrun starts each rank in a session of its own, so the group
        alone would leave ranks behind if torchrun died before them."""
        seen = descendants(process.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            seen |= descendants(process.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in seen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def interrupt(self) -> None:
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for process in running:
            self._kill(process)


def start_process(spec: ProcessSpec, sink: IO[bytes]) -> subprocess.Popen:
    """A process that outlives its node (an InferenceService's server), in a session of its
    own, its output into ``sink``."""
    return subprocess.Popen(
        spec.argv, cwd=spec.cwd, env=spec.env, stdin=subprocess.DEVNULL,
        stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (empty when it is gone)."""
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()
