"""``list``: the runs as ``argo list`` prints workflows (argo-workflows v4.0.5
cmd/argo/commands/list.go and util/printer/workflow-printer.go): NAME, STATUS, AGE,
DURATION, PRIORITY, MESSAGE, aligned by tabwriter with a padding of 3; unfinished runs
first, newest first, then the finished ones by their finish, newest first (``Workflows.
Less``); ``--running``, ``--completed``, ``--status``, ``--prefix``; ``-o wide`` adds
P/R/C (pods pending, running, completed) and PARAMETERS; ``-o name``, ``-o json``."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from flows.local.review import humanize
from flows.local.review.argo_workflow import workflow_status
from flows.local.review.get import epoch, shorten
from flows.local.review.runs import load_state, run_dirs
from flows.local.review.tabwriter import tabulate

COMPLETED = ("Succeeded", "Failed", "Error")


def workflows(runs_dir: Path) -> list[dict[str, Any]]:
    """Every run under ``runs_dir`` as Argo's Workflow, in ``argo list``'s order."""
    found = [workflow_status(load_state(d)) for d in run_dirs(runs_dir)]
    return sorted(found, key=functools.cmp_to_key(_less))


def _less(one: dict[str, Any], other: dict[str, Any]) -> int:
    """workflow_types.go ``Workflows.Less`` as a comparison."""
    created_a = epoch(one["metadata"].get("creationTimestamp")) or 0.0
    created_b = epoch(other["metadata"].get("creationTimestamp")) or 0.0
    finished_a = epoch(one["status"].get("finishedAt"))
    finished_b = epoch(other["status"].get("finishedAt"))
    if finished_a is None and finished_b is None:
        return -1 if created_a >= created_b else 1
    if finished_a is None:
        return -1
    if finished_b is None:
        return 1
    return -1 if finished_b < finished_a else (0 if finished_a == finished_b else 1)


def select(
    found: list[dict[str, Any]],
    running: bool = False,
    completed: bool = False,
    statuses: list[str] | None = None,
    prefix: str = "",
) -> list[dict[str, Any]]:
    """list.go's filters: the completed label, the phase label, the name's prefix."""
    chosen = []
    for workflow in found:
        phase = workflow["status"]["phase"]
        if (running and phase in COMPLETED) or (completed and phase not in COMPLETED):
            continue
        if statuses and phase not in statuses:
            continue
        if workflow["metadata"]["name"].startswith(prefix):
            chosen.append(workflow)
    return chosen


def print_workflows(
    found: list[dict[str, Any]], output: str = "", no_headers: bool = False, now: float = 0.0
) -> str:
    """workflow-printer.go ``PrintWorkflows``."""
    if not found:
        return "[]\n" if output in ("json", "yaml") else "No workflows found\n"
    if output == "name":
        return "".join(w["metadata"]["name"] + "\n" for w in found)
    if output == "json":
        return json.dumps(found, indent=2) + "\n"
    lines = []
    if not no_headers:
        head = "NAME\tSTATUS\tAGE\tDURATION\tPRIORITY\tMESSAGE"
        lines.append(head + ("\tP/R/C\tPARAMETERS" if output == "wide" else ""))
    for workflow in found:
        status, spec = workflow["status"], workflow["spec"]
        created = epoch(workflow["metadata"].get("creationTimestamp"))
        started, finished = epoch(status.get("startedAt")), epoch(status.get("finishedAt"))
        cells = [
            workflow["metadata"]["name"],
            status["phase"],
            humanize.short(created, None, now or None),
            humanize.short(started, finished, now or None) if started else "0s",
            str(spec.get("priority", 0)),
            status.get("message", ""),
        ]
        if output == "wide":
            cells += [pods_by_phase(status.get("nodes", {})), parameters(spec)]
        lines.append("\t".join(cells))
    return tabulate("\n".join(lines) + "\n", padding=3)


def pods_by_phase(nodes: dict[str, dict[str, Any]]) -> str:
    """``countPendingRunningCompletedNodes``: pods fulfilled, running, the rest pending."""
    pods = [n for n in nodes.values() if n["type"] == "Pod"]
    done = sum(n["phase"] in ("Succeeded", "Failed", "Error", "Skipped", "Omitted") for n in pods)
    running = sum(n["phase"] == "Running" for n in pods)
    return f"{len(pods) - done - running}/{running}/{done}"


def parameters(spec: dict[str, Any]) -> str:
    """``parameterString``: name=value, each value cut to 50 characters."""
    given = spec.get("arguments", {}).get("parameters", [])
    return ",".join(f"{p['name']}={shorten(str(p['value']))}" for p in given if "value" in p)
