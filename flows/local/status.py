"""The status of a local run's nodes, as Argo's ``NodePhase`` and ``NodeStatus`` hold it
(pkg/apis/workflow/v1alpha1/workflow_types.go), shared by the runner and its view: each
task's state (``TaskState``: the node phases a local run reaches, plus Cached for a memo
hit), its record (``TaskRecord``: attempts, times, exit code, outputs, log tail, the
nodes it holds), and the run's result (``RunResult``). A record is one of Argo's nodes: a
pod, or a DAG, steps or loop (TaskGroup) node holding others; its key is Argo's node name
without the workflow's (``A``, ``A.B``, ``[0].step``, ``B(0:foo)``).
"""

from __future__ import annotations

import enum
import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

# Argo's message on a DAG or steps node that its template's failFast cut short
# (workflow/controller/operator.go checkParallelism)
FAIL_FAST_MESSAGE = "template has failed or errored children and failFast enabled"


def file_name(node: str) -> str:
    """A node's name as a file or directory name (its log, its task directory): a node's
    name holds [, (, : and a loop item's text, and its directory goes into commands."""
    return re.sub(r"[^\w.-]", "_", node)


class TaskState(str, enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    CACHED = "Cached"
    FAILED = "Failed"
    # Argo's Error: the node could not run at all (a withParam not a list, an expression
    # that failed)
    ERROR = "Error"
    OMITTED = "Omitted"  # its ``depends`` was false, or an upstream failure stopped it
    SKIPPED = "Skipped"  # its ``when`` was false, or a loop over an empty list

    @property
    def done(self) -> bool:
        return self not in (TaskState.PENDING, TaskState.RUNNING)

    @property
    def failed(self) -> bool:
        return self in (TaskState.FAILED, TaskState.ERROR)

    @property
    def done_ok(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.CACHED)

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
    inputs: dict[str, str] = field(default_factory=dict)  # its input parameters, as bound
    outputs: dict[str, str] = field(default_factory=dict)
    result: str | None = None  # outputs.result: the main process's stdout, as Argo keeps it
    kind: str = "Pod"  # Argo's node type: Pod, DAG, Steps, TaskGroup, Skipped
    children: list[str] = field(default_factory=list)  # a TaskGroup's items, by key
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
        """The first failed pod (its log tells why), else the first failed node."""
        failed = [t for t in self.tasks.values() if t.state.failed]
        return next((t for t in failed if t.kind == "Pod"), failed[0] if failed else None)
