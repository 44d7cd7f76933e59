"""What a local run knows of its tasks, shared by the runner and its view: each task's
state (Argo's node phases that a local run reaches, plus Cached for a memo hit), its
record (attempts, times, exit code, outputs, log tail), and the run's result.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path


class TaskState(str, enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    CACHED = "Cached"
    FAILED = "Failed"
    ERRORED = "Error"  # Argo's Error: the task could not be run (an expression failed)
    SKIPPED = "Skipped"  # its ``when`` was false
    OMITTED = "Omitted"  # its ``depends`` was false, or an upstream failure stopped it

    @property
    def done_ok(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.CACHED)

    @property
    def fulfilled(self) -> bool:
        """Argo's ``Fulfilled``: it will not change any more."""
        return self not in (TaskState.PENDING, TaskState.RUNNING)

    @property
    def phase(self) -> str:
        """Argo's node phase (a memo hit is a Succeeded node there)."""
        return "Succeeded" if self is TaskState.CACHED else self.value


@dataclass
class TaskRecord:
    name: str
    template: str
    state: TaskState = TaskState.PENDING
    attempts: int = 0
    started: float | None = None
    finished: float | None = None
    exit_code: int | None = None
    message: str = ""
    process_seconds: float = 0.0  # spawn to exit of its processes, all attempts
    outputs: dict[str, str] = field(default_factory=dict)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=200), repr=False)

    @property
    def seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.finished or time.time()) - self.started


@dataclass
class RunResult:
    name: str
    status: str  # Argo's workflow.status: Succeeded | Failed | Error (a stopped run: Failed)
    run_dir: Path
    tasks: dict[str, TaskRecord]
    globals: dict[str, str]
    seconds: float

    @property
    def failed_task(self) -> TaskRecord | None:
        failed = (TaskState.FAILED, TaskState.ERRORED)
        return next((t for t in self.tasks.values() if t.state in failed), None)
