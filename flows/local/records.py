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
    OMITTED = "Omitted"

    @property
    def done_ok(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.CACHED)


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
        return next((t for t in self.tasks.values() if t.state is TaskState.FAILED), None)
