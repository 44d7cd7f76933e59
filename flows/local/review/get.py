"""``get RUN``: the run as ``argo get`` prints a workflow (argo-workflows v4.0.5
cmd/argo/commands/common/get.go ``PrintWorkflowHelper``): the header (Name, Status,
Created, Started, Finished, Duration, Progress, Parameters, Output Parameters), then the
node tree, STEP / TEMPLATE / PODNAME / DURATION / MESSAGE, with its glyphs: a DAG's or
steps' nodes under it, a step group's members joined by ``┬─ ├─ └─``, StepGroup nodes and
Omitted nodes of type Skipped left out (``filterNode``), siblings by start time; the exit
handler's tree after a blank line. ``-o wide`` adds ARTIFACTS, RESOURCESDURATION and
NODENAME as Argo's, and OUTPUTS (the output parameters, a local addition)."""

from __future__ import annotations

import functools
import math
import os
import socket
from datetime import datetime, timezone
from typing import Any

from flows.local.review import humanize
from flows.local.review.node_tree import pod_name
from flows.local.review.tabwriter import tabulate

# cmd/argo/commands/common/common.go JobStatusIconMap (Omitted has no icon there) and
# the ANSI colour of each
ICONS = {
    "Pending": ("◷", 33), "Running": ("●", 36), "Succeeded": ("✔", 32),
    "Skipped": ("○", 39), "Failed": ("✖", 31), "Error": ("⚠", 31),
}  # fmt: skip
BOUNDARY = ("DAG", "Steps")
NON_BOUNDARY_PARENT = ("StepGroup", "Retry")
EXECUTION = ("Pod", "Skipped", "Suspend", "HTTP", "Plugin")
FIELD = "%-20s %s\n"  # get.go's fmtStr


def ansi(text: str, code: int, colour: bool) -> str:
    """common.go ``ansiFormat``: always wrapped when colour is on, so cells align."""
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text


def epoch(value: str | None) -> float | None:
    """An RFC 3339 time of the Workflow (UTC, whole seconds) as seconds since the epoch."""
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def header(workflow: dict[str, Any], now: float | None = None) -> str:
    status, spec, meta = workflow["status"], workflow["spec"], workflow["metadata"]
    account = spec.get("serviceAccountName") or "unset (will run with the default ServiceAccount)"
    text = FIELD % ("Name:", meta["name"]) + FIELD % ("Namespace:", meta["namespace"])
    text += FIELD % ("ServiceAccount:", account) + FIELD % ("Status:", status["phase"])
    if status.get("message"):
        text += FIELD % ("Message:", status["message"])
    created = epoch(meta.get("creationTimestamp")) or epoch(status.get("startedAt"))
    started, finished = epoch(status.get("startedAt")), epoch(status.get("finishedAt"))
    if created is not None:
        text += FIELD % ("Created:", humanize.timestamp(created, now))
    if started is not None:
        text += FIELD % ("Started:", humanize.timestamp(started, now))
    if finished is not None:
        text += FIELD % ("Finished:", humanize.timestamp(finished, now))
    if started is not None:
        text += FIELD % ("Duration:", humanize.long(started, finished, now))
    text += FIELD % ("Progress:", status.get("progress", ""))
    parameters = [p for p in spec.get("arguments", {}).get("parameters", []) if "value" in p]
    if parameters:
        text += FIELD % ("Parameters:", "")
        text += "".join(FIELD % (f"  {p['name']}:", p["value"]) for p in parameters)
    outputs = status.get("outputs", {}).get("parameters", [])
    if outputs:
        text += FIELD % ("Output Parameters:", "")
        text += "".join(FIELD % (f"  {p['name']}:", p["value"]) for p in outputs)
    return text


class Tree:
    """get.go's render trees over ``status.nodes``: boundary nodes (DAG, Steps) hold
    the nodes whose boundaryID they are, non-boundary parents (StepGroup, Retry) their
    children, execution nodes nothing."""

    def __init__(self, workflow: dict[str, Any], output: str, colour: bool, now: float) -> None:
        self.name = workflow["metadata"]["name"]
        self.nodes: dict[str, dict[str, Any]] = workflow["status"].get("nodes", {})
        self.output, self.colour, self.now = output, colour, now
        self.host = socket.gethostname()
        self.contained: dict[str, list[str]] = {i: [] for i in self.nodes}
        parent_of = {c: i for i, n in self.nodes.items() if n["type"] in NON_BOUNDARY_PARENT
                     for c in n.get("children", [])}  # fmt: skip
        self.roots: list[str] = []
        for ident, node in self.nodes.items():
            holder = parent_of.get(ident) or node.get("boundaryID", "")
            if holder and holder in self.nodes:
                self.contained[holder].append(ident)
            elif not holder:
                self.roots.append(ident)
        for ident in self.contained:
            self.contained[ident].sort(key=functools.cmp_to_key(self._before))

    def _before(self, one: str, other: str) -> int:
        """insertSorted's order: by start; at the same second two loop items by their
        index, any others by name (a node that never started last: Argo gives every node
        a start)."""
        a, b = self.nodes[one], self.nodes[other]
        started_a = epoch(a.get("startedAt")) or math.inf
        started_b = epoch(b.get("startedAt")) or math.inf
        if started_a != started_b:
            return -1 if started_a < started_b else 1
        index_a, index_b = item_index(a["displayName"]), item_index(b["displayName"])
        if index_a >= 0 and index_b >= 0:
            return index_a - index_b
        return (a["displayName"] > b["displayName"]) - (a["displayName"] < b["displayName"])

    def render(self) -> str:
        columns = ["TEMPLATE", "PODNAME", "DURATION", "MESSAGE"]
        if self.output == "wide":
            columns = ["TEMPLATE", "PODNAME", "DURATION", "ARTIFACTS", "MESSAGE"]
            columns += ["RESOURCESDURATION", "NODENAME", "OUTPUTS"]
        elif self.output == "short":
            columns.append("NODENAME")
        lines = [ansi("STEP", 39, self.colour) + "\t" + "\t".join(columns)]
        if self.name in self.nodes:
            self._node(self.name, " ", " ", lines)
        exit_id = next((i for i in self.roots if self.nodes[i]["name"].endswith(".onExit")), None)
        if exit_id:
            lines.append("\t" * 5)
            self._node(exit_id, " ", " ", lines)
        return tabulate("\n".join(lines) + "\n", padding=2)

    def _filtered(self, node: dict[str, Any]) -> tuple[bool, bool]:
        """filterNode: (left out, its children indented as a group's)."""
        if node["type"] == "Retry" and len(node.get("children", [])) == 1:
            return True, False
        if node["type"] == "StepGroup":
            return True, True
        return node["type"] == "Skipped" and node["phase"] == "Omitted", False

    def _node(self, ident: str, prefix: str, child_prefix: str, lines: list[str]) -> None:
        node = self.nodes[ident]
        filtered, indent = self._filtered(node)
        if not filtered:
            lines.append(prefix + self._cells(node))
        held = self.contained[ident] if node["type"] not in EXECUTION else []
        last = len(held) - 1
        for index, child in enumerate(held):
            if filtered and indent:
                part, sub = (("──", "  ") if last == 0 else ("┬─", "│ ") if index == 0
                             else ("└─", "  ") if index == last else ("├─", "│ "))  # fmt: skip
            elif not filtered:
                part, sub = ("└─", "  ") if index == last else ("├─", "│ ")
            else:
                part, sub = "", ""
            if not filtered:
                self._node(child, child_prefix + part, child_prefix + sub, lines)
            else:
                first = prefix if index == 0 else child_prefix
                self._node(child, first + part, child_prefix + sub, lines)

    def _cells(self, node: dict[str, Any]) -> str:
        """printNode's cells for one node."""
        icon, code = ICONS.get(node["phase"], ("", 39))
        name = f"{ansi(icon, code, self.colour) if icon else ''} {node['displayName']}"
        template = node.get("templateName", "")
        pod = node["type"] == "Pod"
        podname = pod_name(self.name, node["name"], template) if pod else ""
        duration = ""
        if pod:
            started = epoch(node.get("startedAt"))
            duration = humanize.short(started, epoch(node.get("finishedAt")), self.now)
        message = node.get("message", "")
        if self.output == "wide":
            outputs = node.get("outputs", {})
            artifacts = ",".join(a["name"] for a in outputs.get("artifacts", []))
            values = ",".join(
                f"{p['name']}={shorten(p['value'])}" for p in outputs.get("parameters", [])
            )
            cells = [name, template, podname, duration, artifacts, message, "",
                     self.host if pod else "", values]  # fmt: skip
            return "\t".join(cells)
        if self.output == "short":
            cells = [name, template, podname, duration, message, self.host if pod else ""]
            return "\t".join(cells)
        return "\t".join([name, template, podname, duration, message, ""])


def item_index(name: str) -> int:
    """util.go ``RecoverIndexFromNodeName``: the number between the first ( and the first
    :, else -1."""
    start, end = name.find("("), name.find(":")
    if start < 0 or end < 0:
        return -1
    try:
        return int(name[start + 1 : end])
    except ValueError:
        return -1


def shorten(value: str, limit: int = 50) -> str:
    """printer.go parameterString's cut: the first and last characters around ``...``."""
    value = value.strip().replace("\n", " ")  # a table cell: one line
    if len(value) <= limit:
        return value
    limit -= 3
    return value[: limit - 15] + "..." + value[-15:]


def print_workflow(workflow: dict[str, Any], output: str = "", colour: bool | None = None) -> str:
    """What ``argo get`` prints (``output``: "", "wide" or "short")."""
    if colour is None:
        colour = os.isatty(1) and os.environ.get("TERM") != "dumb" and "NO_COLOR" not in os.environ
    now = datetime.now().timestamp()
    tree = Tree(workflow, output, colour, now).render()
    if output == "short":
        return tree
    return header(workflow, now) + "\n" + tree
