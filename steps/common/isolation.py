"""Work run in a child process, so that a crash, an abort or a hang costs that work only.

Native code runs in every builder and runtime the optimize and benchmark steps load
(Inductor's C++ and Triton, TensorRT, ONNX Runtime, OpenVINO): any of them can take its
process down (SIGSEGV, SIGABRT) or never return. ``Worker`` runs such work in a spawned
child (``spawn``, never ``fork``: a forked CUDA context is unusable, and a fork copies the
parent's threads' locks mid-state). What crosses between the two is small: the set-up's
argument (file paths), each job's argument and its result (pickled), never a live model;
the set-up and the jobs may be named (``module:function``) so that only the child imports
them.

The child runs ``setup(setup_arg)`` once (within ``startup_limit_s``, imports included),
then ``job(state, arg)`` per call, one at a time; each within ``limit_s`` seconds. When a
job's process dies (a signal, an exit) or runs past its limit (the parent asks
faulthandler for the stacks with SIGUSR1, then kills it), ``run`` raises ``ChildFailed``
with a ``ProcessFailure``: the cause, the signal or the limit, and the failing thread's
innermost Python frame, which faulthandler wrote to a file the parent reads. The next call
starts a fresh child; ``jobs_per_process`` (None: no limit) starts one after that many
jobs as well.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from steps.common.contracts.failure import ProcessFailure

STARTUP_LIMIT_S = 300.0  # a child's start: the interpreter, its imports (torch) and set-up
DUMP_WAIT_S = 3.0  # a stopped child's stacks: how long faulthandler gets to write them
CLOSE_WAIT_S = 10.0  # an idle child asked to exit: how long before it is killed
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ChildFailed(RuntimeError):
    """The child's work did not finish; ``failure`` says how."""

    def __init__(self, failure: ProcessFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


Function = Callable[..., Any] | str  # or "module:function", imported in the child alone


class Worker:
    """A spawned child that makes its state once (``setup(setup_arg)``) and runs jobs on
    it one at a time (``run``); ``scratch`` holds faulthandler's files. ``setup`` and the
    jobs may be given as ``module:function``: then only the child imports them. ``start``
    spawns the child ahead of the first job, so that its imports overlap the caller's work
    (``setup_arg`` may be set until then). A context manager: the child is stopped on the
    way out."""

    def __init__(
        self,
        setup: Function | None,
        scratch: Path,
        *,
        setup_arg: Any = None,
        name: str = "worker",
        jobs_per_process: int | None = None,
        startup_limit_s: float = STARTUP_LIMIT_S,
    ) -> None:
        self.setup, self.setup_arg, self.scratch = setup, setup_arg, scratch
        self.name, self.jobs_per_process = name, jobs_per_process
        self.startup_limit_s = startup_limit_s
        self.started = 0  # processes started so far: the spawns paid
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Any = None
        self._faults: Path | None = None
        self._jobs = 0
        self._ready = False

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Spawn the child now (if none runs): it imports what it needs while the caller
        goes on; its set-up waits for the first job."""
        if self._process is not None:
            return
        context = multiprocessing.get_context("spawn")
        self.started += 1
        self._faults = self.scratch / f"{self.name}-{self.started}.faults"
        self._faults.write_bytes(b"")
        parent, child = context.Pipe()
        self._process = context.Process(
            target=_child_main,
            args=(child, str(self._faults), self.setup),
            name=f"{self.name}-{self.started}",
        )
        self._process.start()
        child.close()  # the child's end lives in the child: EOF here when it dies
        self._conn, self._jobs, self._ready = parent, 0, False

    def run(self, job: Function, arg: Any, limit_s: float, what: str) -> Any:
        """``job(state, arg)``'s result, from the child; ``what`` names the work in a
        failure's message. Raises ChildFailed."""
        used_up = self.jobs_per_process is not None and self._jobs >= self.jobs_per_process
        if self._process is not None and used_up:
            self.close()
        self.start()
        if not self._ready:
            self._conn.send(("setup", self.setup_arg))
            try:
                self._answer(self.startup_limit_s, f"{what} (starting its process)")
            except ChildFailed:
                self.close()  # a set-up that raised has ended its child
                raise
            self._ready = True
        self._jobs += 1
        self._conn.send((job, arg))
        return self._answer(limit_s, what)

    def close(self) -> None:
        """Ask an idle child to exit; kill it if it does not."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        process.join(CLOSE_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join()
        self._conn.close()

    def _answer(self, limit_s: float, what: str) -> Any:
        assert self._process is not None
        if not self._conn.poll(limit_s):
            self._stop_with_stacks()
            failure = ProcessFailure(
                cause="timed_out",
                message=f"{what}: still running after {limit_s:g} s, stopped{self._where()}",
                limit_s=limit_s,
                frame=self._frame(),
            )
            raise ChildFailed(failure)
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError):  # the child died: how?
            raise ChildFailed(self._death(what)) from None
        if kind == "raised":  # the child goes on: the next job runs in it
            raised = f"{value['type']}: {value['message']}" if value["message"] else value["type"]
            failure = ProcessFailure(
                cause="raised", message=f"{what}: {raised}", frame=value["frame"]
            )
            raise ChildFailed(failure)
        return value

    def _death(self, what: str) -> ProcessFailure:
        process, self._process = self._process, None
        assert process is not None
        process.join(DUMP_WAIT_S)
        if process.is_alive():  # closed its end but lives on: stop it
            process.kill()
            process.join()
        self._conn.close()
        code = process.exitcode
        frame = self._frame()
        if code is not None and code < 0:
            name = _signal_name(-code)
            return ProcessFailure(
                cause="crashed", message=f"{what}: process crashed ({name}{self._where()})",
                signal=name, frame=frame,
            )  # fmt: skip
        return ProcessFailure(
            cause="exited", message=f"{what}: process exited with code {code}, no result",
            exit_code=code, frame=frame,
        )  # fmt: skip

    def _stop_with_stacks(self) -> None:
        """SIGUSR1 (faulthandler writes every thread's stack), then SIGKILL."""
        process, self._process = self._process, None
        assert process is not None and self._faults is not None
        if process.pid is not None and process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGUSR1)
            deadline = time.monotonic() + DUMP_WAIT_S
            while time.monotonic() < deadline and "  File " not in self._faults.read_text(
                errors="replace"
            ):
                time.sleep(0.05)
            time.sleep(0.1)  # the rest of the dump
        process.kill()
        process.join()
        self._conn.close()

    def _frame(self) -> str | None:
        if self._faults is None or not self._faults.exists():
            return None
        return innermost_frame(self._faults.read_text(errors="replace"))

    def _where(self) -> str:
        frame = self._frame()
        return f", in {frame}" if frame else ""


def innermost_frame(dump: str) -> str | None:
    """The failing thread's innermost Python frame in faulthandler's report (``File "x.py",
    line 3 in f``): the ``Current thread`` (the one that crashed, or took the signal); else
    the last thread listed (the main thread: faulthandler lists the newest first)."""
    blocks: list[tuple[bool, list[str]]] = []
    for line in dump.splitlines():
        if line.startswith(("Current thread ", "Thread 0x")):
            blocks.append((line.startswith("Current thread "), []))
        elif blocks and line.startswith("  File "):
            blocks[-1][1].append(line.strip())
    current = [frames for is_current, frames in blocks if is_current and frames]
    chosen = current[-1] if current else next((f for _, f in reversed(blocks) if f), None)
    return chosen[0] if chosen else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _child_main(conn: Any, faults_path: str, setup: Function | None) -> None:
    """The child: faulthandler on a file the parent reads, the set-up's module imported at
    once, the set-up when its argument comes, then jobs until the parent sends None or goes
    away."""
    _die_with_parent()
    sys.stdout = sys.stderr  # the step's stdout carries its result alone
    with open(faults_path, "w") as faults:
        faulthandler.enable(faults, all_threads=True)
        faulthandler.register(signal.SIGUSR1, faults, all_threads=True)
        try:
            make = _resolve(setup) if setup is not None else None
            message = conn.recv()
            if message is None:
                return
            state = make(message[1]) if make is not None else None
        except (EOFError, OSError):
            return
        except BaseException as exc:  # the set-up failed: the job it was for fails
            conn.send(("raised", _raised(exc)))
            return
        conn.send(("ready", None))
        jobs: dict[str, Callable] = {}
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message is None:
                return
            job, arg = message
            try:
                if isinstance(job, str):
                    job = jobs.setdefault(job, _resolve(job))
                result = job(state, arg)
            except BaseException as exc:  # the job's own failure: reported, the child goes on
                conn.send(("raised", _raised(exc)))
                continue
            conn.send(("ok", result))


def _resolve(function: Function) -> Callable:
    """``module:function`` imported (here, in the child), or the callable itself."""
    if callable(function):
        return function
    module, _, name = function.partition(":")
    return getattr(importlib.import_module(module), name)


def _raised(exc: BaseException) -> dict[str, Any]:
    lines = str(exc).strip().splitlines()
    frames = traceback.extract_tb(exc.__traceback__)
    frame = None
    if frames:
        last = frames[-1]
        frame = f'File "{last.filename}", line {last.lineno} in {last.name}'
    return {"type": type(exc).__name__, "message": lines[0] if lines else "", "frame": frame}


def _die_with_parent() -> None:
    """Linux: this child is killed when the step's process dies, even by SIGKILL (strictly:
    when the thread that started it ends; a step starts its Worker on its main thread)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
