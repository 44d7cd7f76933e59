"""A local run's node records as Argo's ``status.nodes``, keyed by node id as Argo's
controller keys them (argo-workflows v4.0.5 pkg/apis/workflow/v1alpha1/workflow_types.go
``NodeID``: the workflow's name for its root, else ``<workflow>-<fnv32a of the node's
name>``); each node has Argo's name, displayName (the name less its boundary's,
operator.go ``initializeNode``), type, templateName, phase, boundaryID, message,
startedAt, finishedAt, inputs, outputs and the ``children`` edges the controller draws
(dag.go ``connectDependencies``: a DAG's root tasks under the DAG node, every other task
under the outbound nodes of its dependencies, a loop's items under its TaskGroup; steps.go:
a StepGroup node per group, each under the outbound nodes of the group before). A local
record is one node; the StepGroups, which the runner does not record, are derived from
their steps. A pod's attempts stay one node (Argo would add a Retry node with a child per
attempt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from flows.local.conditions.continue_on import continues
from flows.local.conditions.depends import dependency_names
from flows.local.status import TaskState

EXIT_KEY = "onExit"  # the exit handler's node: <workflow>.onExit
DONE = {"Succeeded", "Failed", "Error", "Skipped", "Omitted"}
FAILED = {"Failed", "Error"}
SEPARATOR = re.compile(r"^(\[\d+\])?\.")  # operator.go stepsOrDagSeparator


def fnv32a(text: str) -> int:
    """Go's hash/fnv New32a over the UTF-8 bytes."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def node_id(workflow: str, name: str) -> str:
    return workflow if name == workflow else f"{workflow}-{fnv32a(name)}"


def pod_name(workflow: str, name: str, template: str) -> str:
    """Argo's v2 pod name (workflow/util/pod_name.go ``GeneratePodName``)."""
    if name == workflow:
        return workflow
    prefix = f"{workflow}-{template}" if template else workflow
    return f"{prefix[:242]}-{fnv32a(name)}"


def rfc3339(epoch: float | None) -> str | None:
    """metav1.Time as JSON: UTC, whole seconds."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase_of(record: dict[str, Any]) -> str:
    """Argo's node phase of a record (a memo hit is a Succeeded node there)."""
    return TaskState(record["state"]).phase


@dataclass
class NodeTree:
    """Builds ``status.nodes`` from one run's records, walking the templates from the
    entrypoint as the controller does, then the exit handler."""

    workflow: str
    templates: dict[str, dict[str, Any]]
    records: dict[str, dict[str, Any]]
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # node id -> the record's key

    def name(self, key: str) -> str:
        """Argo's node name of a record's key (keys leave the workflow's name out)."""
        if key in ("", self.workflow):
            return self.workflow
        return self.workflow + key if key.startswith("[") else f"{self.workflow}.{key}"

    # --- nodes ---------------------------------------------------------------------------
    def add(self, key: str, record: dict[str, Any], boundary: str, kind: str = "") -> str:
        name = self.name(key)
        ident = node_id(self.workflow, name)
        display = name
        if boundary in self.nodes:
            display = SEPARATOR.sub("", name.removeprefix(self.nodes[boundary]["name"]))
        node: dict[str, Any] = {
            "id": ident, "name": name, "displayName": display,
            "type": kind or record.get("kind", "Pod"), "templateName": record["template"],
            "phase": phase_of(record), "boundaryID": boundary,
            "message": record.get("message", ""),
            "startedAt": rfc3339(record.get("started")),
            "finishedAt": rfc3339(record.get("finished")),
        }  # fmt: skip
        if node["startedAt"] is None and node["phase"] in DONE and record.get("finished"):
            node["startedAt"] = node["finishedAt"]  # initializeNode: a settled node's start
        inputs = record.get("inputs") or {}
        if inputs:
            node["inputs"] = {"parameters": [{"name": k, "value": v} for k, v in inputs.items()]}
        outputs = self._outputs(record)
        if outputs:
            node["outputs"] = outputs
        if record["state"] == TaskState.CACHED.value:
            memoize = self.templates.get(record["template"], {}).get("memoize", {})
            cache = memoize.get("cache", {}).get("configMap", {}).get("name", "")
            entry = record.get("message", "").rpartition(" ")[2]
            node["memoizationStatus"] = {"hit": True, "key": entry, "cacheName": cache}
        node["children"] = []
        node = {k: v for k, v in node.items() if v not in (None, "")}
        node.setdefault("children", [])
        self.nodes[ident], self.keys[ident] = node, key
        return ident

    def _outputs(self, record: dict[str, Any]) -> dict[str, Any]:
        outputs: dict[str, Any] = {}
        values = record.get("outputs") or {}
        if values:
            outputs["parameters"] = [{"name": k, "value": v} for k, v in values.items()]
        template = self.templates.get(record["template"], {})
        declared = template.get("outputs", {}).get("artifacts", [])
        if declared and record["state"] == TaskState.SUCCEEDED.value:
            outputs["artifacts"] = [
                {"name": a["name"], "path": a.get("path", "")} for a in declared
            ]
        if record.get("result") is not None:
            outputs["result"] = record["result"]
        if record.get("exit_code") is not None:
            outputs["exitCode"] = str(record["exit_code"])
        return outputs

    def child(self, parent: str, ident: str) -> None:
        children = self.nodes[parent]["children"]
        if ident not in children:
            children.append(ident)

    def outbound(self, ident: str) -> list[str]:
        """operator.go ``getOutboundNodes``: the nodes a following task hangs under."""
        node = self.nodes[ident]
        if node["type"] in ("Pod", "Skipped"):
            return [ident]
        if node["type"] == "TaskGroup":
            if not node["children"]:
                return [ident]
            return [o for c in node["children"] for o in self.outbound(c)]
        if node.get("memoizationStatus", {}).get("hit"):
            return [ident]
        return [o for c in node.get("outboundNodes", []) for o in self.outbound(c)]

    # --- the walk ------------------------------------------------------------------------
    def visit(self, key: str, record: dict[str, Any], boundary: str) -> str:
        """A record's node and, for a DAG, steps or loop node, the nodes it holds."""
        ident = self.add(key, record, boundary)
        template = self.templates.get(record["template"], {})
        kind = self.nodes[ident]["type"]
        if kind == "DAG" and "dag" in template:
            self._dag(key, template, ident)
        elif kind == "Steps" and "steps" in template:
            self._steps(key, template, ident)
        elif kind == "TaskGroup":
            for item in record.get("children", []):
                if item in self.records:
                    self.child(ident, self.visit(item, self.records[item], boundary))
        return ident

    def _dag(self, key: str, template: dict[str, Any], boundary: str) -> None:
        tasks = {t["name"]: t for t in template["dag"].get("tasks", [])}
        made: dict[str, str] = {}

        def place(name: str) -> None:  # dependencies first: their outbound nodes exist
            if name in made or name not in tasks:
                return
            made[name] = ""
            for dependency in dependency_names(tasks[name]):
                place(dependency)
            task_key = f"{key}.{name}" if key else name
            record = self.records.get(task_key)
            if record is None:
                return
            ident = made[name] = self.visit(task_key, record, boundary)
            above = [made[d] for d in dependency_names(tasks[name]) if made.get(d)]
            if not dependency_names(tasks[name]):
                self.child(boundary, ident)
            for dependency in above:
                for out in self.outbound(dependency):
                    self.child(out, ident)

        for name in tasks:
            place(name)
        depended = {d for t in tasks.values() for d in dependency_names(t)}
        targets = [made[n] for n in tasks if n not in depended and made.get(n)]
        self.nodes[boundary]["outboundNodes"] = [o for t in targets for o in self.outbound(t)]

    def _steps(self, key: str, template: dict[str, Any], boundary: str) -> None:
        previous: str | None = None
        for index, group in enumerate(template["steps"]):
            group_key = f"{key}[{index}]"
            members = [(m, step) for step in group for m in self._step_nodes(group_key, step)]
            if not members:
                break  # the group never started
            record = self._group_record(members)
            ident = self.add(group_key, record, boundary, "StepGroup")
            self.nodes[ident].pop("templateName", None)  # a StepGroup has no template
            if previous is None:
                self.child(boundary, ident)
            elif not self.nodes[previous]["children"]:
                self.child(previous, ident)
            else:
                for child in self.nodes[previous]["children"]:
                    for out in self.outbound(child):
                        self.child(out, ident)
            for member, _ in members:
                self.child(ident, self.visit(member, self.records[member], boundary))
            previous = ident
        last = self.nodes[previous]["children"] if previous else []
        self.nodes[boundary]["outboundNodes"] = [o for c in last for o in self.outbound(c)]

    def _step_nodes(self, group_key: str, step: dict[str, Any]) -> list[str]:
        """A step's node, or its items' nodes in item order (an item's description has
        no parentheses: flows.local.nodes.loops.node_name)."""
        direct = f"{group_key}.{step['name']}"
        if direct in self.records:
            return [direct]
        item = re.compile(re.escape(direct) + r"\((\d+):[^()]*\)")
        found = [(int(m.group(1)), k) for k in self.records if (m := item.fullmatch(k))]
        return [k for _, k in sorted(found)]

    def _group_record(self, members: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """A StepGroup's phase and times, from its steps' (steps.go): Running until every
        step ended, then the failure of a step that does not continue on it, if any."""
        records = [(self.records[key], step) for key, step in members]
        started = [r["started"] for r, _ in records if r.get("started")]
        finished = [r["finished"] for r, _ in records if r.get("finished")]
        done = all(phase_of(r) in DONE for r, _ in records)
        phase = "Succeeded" if done else "Running"
        failures = [
            TaskState(r["state"]).phase
            for r, step in records
            if TaskState(r["state"]).failed and not continues(step, TaskState(r["state"]))
        ]
        if done and failures:
            phase = failures[0]
        return {
            "template": "", "kind": "StepGroup", "state": phase,
            "started": min(started) if started else None,
            "finished": max(finished) if done and finished else None,
        }  # fmt: skip
