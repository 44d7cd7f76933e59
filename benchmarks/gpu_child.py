"""One piece of a GPU benchmark in a child process of its own, with a time limit, and what
became of it: finished, failed (its exit code and last line), crashed (the signal and the
crashed thread's innermost Python frame, from faulthandler) or timed out (its whole process
group killed). A compiler that segfaults, aborts or hangs costs that piece, not the run.

Used by ``gpu.py`` (every training loop and inference variant) and ``aoti_diagnose.py``
(every AOTInductor configuration). Standard library only: these run on a bare GPU machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STAGE = "STAGE "  # a child prints "STAGE <name>" as it enters each stage, flushed


@dataclass
class Outcome:
    """What became of one child: ``status`` is ``finished``, ``failed``, ``crashed`` or
    ``timed out``; ``stage`` the last stage it announced; ``detail`` one line saying how."""

    status: str
    seconds: float
    stage: str = ""
    detail: str = ""
    stdout: str = ""

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    def describe(self) -> str:
        """One line: ``crashed (SIGSEGV) while compiling, in File ...``."""
        where = f" in stage {self.stage}" if self.stage and not self.finished else ""
        return f"{self.status}{where}" + (f": {self.detail}" if self.detail else "")


def run_child(
    command: list[str],
    limit_s: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run ``command`` (a new session, so a timeout kills its compile workers too) for at
    most ``limit_s`` seconds, with ``env`` added to this environment; stdout is kept
    whole, stderr's faulthandler report read."""
    env = {**os.environ, **(env or {}), "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1"}
    tic = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=max(limit_s, 0.1))
    except subprocess.TimeoutExpired:
        kill_group(process)
        out, err = process.communicate()
        seconds = time.perf_counter() - tic
        return Outcome("timed out", seconds, last_stage(out), f"after {limit_s:.0f} s", out)
    seconds = time.perf_counter() - tic
    code = process.returncode
    if code < 0:
        name = signal.Signals(-code).name
        return Outcome("crashed", seconds, last_stage(out), f"{name}{crash_site(err)}", out)
    if code != 0:
        lines = [line for line in err.splitlines() if line.strip()] or ["(no output)"]
        return Outcome("failed", seconds, last_stage(out), f"exit {code}: {lines[-1][:300]}", out)
    return Outcome("finished", seconds, last_stage(out), "", out)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the child's whole session (Inductor's compile workers included)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def last_stage(stdout: str) -> str:
    stages = [line[len(STAGE) :].strip() for line in stdout.splitlines() if line.startswith(STAGE)]
    return stages[-1] if stages else ""


def crash_site(stderr: str) -> str:
    """ ", in <file, line, function>" of the crashed thread's innermost Python frame, from
    faulthandler's report (``Current thread ...`` then its frames, innermost first)."""
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), None)
    if start is None:
        return ""
    frame = next((line.strip() for line in lines[start + 1 :] if line.startswith("  File ")), "")
    return f", in {frame}" if frame else ""
