"""``logs RUN [TASK]``: a run's task logs as ``argo logs`` prints a workflow's (argo-
workflows v4.0.5 cmd/argo/commands/logs.go and common/logs.go ``LogWorkflow``): each line
prefixed by the name of the node it came from (the task: ``stage: ...``), coloured by that
name on a terminal as ``ansiColorCode`` colours it; every pod's log in start order, or one
task's; ``-f`` follows a running run to its end, printing what each task writes as it
writes it; ``--tail N`` and ``--grep`` as argo's."""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.local.review.argo_workflow import workflow_status
from flows.local.review.node_tree import pod_name
from flows.local.review.runs import RunNotFound, load_state
from flows.local.status import file_name

COLOURS = (32, 33, 34, 35, 36, 37)  # common.go ansiColorCode's palette
POLL_S = 0.5


def colour_of(name: str) -> int:
    return COLOURS[sum(ord(c) for c in name) % len(COLOURS)]


@dataclass
class LogSource:
    """One node's log file and how far it has been read."""

    task: str  # the node's key: its name less the workflow's
    path: Path
    offset: int = 0
    partial: str = field(default="", repr=False)

    def read(self, final: bool = False) -> list[str]:
        """The complete lines written since the last read (and the unfinished last one
        when ``final``)."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        text = self.partial + data.decode(errors="replace")
        lines = text.split("\n")
        self.partial = lines.pop()
        if final and self.partial:
            lines.append(self.partial)
            self.partial = ""
        return lines


def pod_tasks(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's pod nodes in the order they started (never started last)."""
    pods = [n for n in workflow["status"].get("nodes", {}).values() if n["type"] == "Pod"]
    return sorted(pods, key=lambda n: n.get("startedAt") or "~")


def task_key(workflow: dict[str, Any], node: dict[str, Any]) -> str:
    name, node_name = workflow["metadata"]["name"], node["name"]
    if node_name == name:
        return name
    return node_name[len(name) :].removeprefix(".")


def choose(workflow: dict[str, Any], task: str) -> dict[str, Any]:
    """The pod node named ``task``: its key (``stage``, ``onExit.close-run``), its pod
    name as ``argo get`` prints it, or its display name when only one node has it."""
    name = workflow["metadata"]["name"]
    pods = pod_tasks(workflow)
    for node in pods:
        if task in (task_key(workflow, node), node["name"], node["id"]):
            return node
        if task == pod_name(name, node["name"], node.get("templateName", "")):
            return node
    shown = [n for n in pods if n["displayName"] == task]
    if len(shown) == 1:
        return shown[0]
    keys = [task_key(workflow, n) for n in pods]
    nearest = ", ".join(difflib.get_close_matches(task, keys, n=3, cutoff=0.0)) or "none"
    raise RunNotFound(f"run {name} has no task {task!r}; the nearest: {nearest}")


def sources(run_dir: Path, workflow: dict[str, Any], task: str | None) -> list[LogSource]:
    nodes = [choose(workflow, task)] if task else pod_tasks(workflow)
    keys = [task_key(workflow, n) for n in nodes]
    return [LogSource(k, run_dir / "logs" / f"{file_name(k)}.log") for k in keys]


def print_logs(
    run_dir: Path,
    task: str | None = None,
    follow: bool = False,
    tail: int = -1,
    grep: str = "",
    colour: bool = False,
    write: Callable[[str], None] = print,
    poll_s: float = POLL_S,
) -> None:
    """Print the run's logs (one task's with ``task``); with ``follow``, until the run
    ended and its logs were read to their end."""
    pattern = re.compile(grep) if grep else None

    def emit(source: LogSource, lines: list[str]) -> None:
        for line in lines:
            if pattern and not pattern.search(line):
                continue
            text = f"{source.task}: {line}"
            write(f"\x1b[{colour_of(source.task)}m{text}\x1b[0m" if colour else text)

    workflow = workflow_status(load_state(run_dir))
    known = {s.task: s for s in sources(run_dir, workflow, task)}
    for source in known.values():
        lines = source.read(final=not follow)
        emit(source, lines[-tail:] if tail >= 0 else lines)
    while follow:
        workflow = workflow_status(load_state(run_dir))
        ended = workflow["status"]["phase"] not in ("Running", "Pending")
        for source in sources(run_dir, workflow, task):  # tasks started since
            known.setdefault(source.task, source)
        for source in known.values():
            emit(source, source.read(final=ended))
        if ended:
            return
        time.sleep(poll_s)
