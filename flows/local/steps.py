"""Steps templates, at any depth, as Argo's controller runs them (workflow/controller/
steps.go): the groups in order, the steps of a group side by side (at most the template's
``parallelism`` at once). A group fails when one of its steps failed without ``continueOn``;
then the template fails ("child '...' failed") and no later group runs. A looping step is one
node per item, with no node of its own; later groups see the items' outputs aggregated.
With the template's ``failFast: true``, no step of a group starts after one failed.
"""

from __future__ import annotations

from typing import Any

from flows.local.loops import aggregate
from flows.local.nodes import FAIL_FAST_MESSAGE, NodeExecution, Unit, continues, node_refs
from flows.local.records import TaskRecord, TaskState


class StepsExecution(NodeExecution):
    def _run_steps(
        self, record: TaskRecord, template: dict[str, Any], inputs: dict[str, str]
    ) -> dict[str, str] | None:
        limit = int(template.get("parallelism") or 0)
        fail_fast = template.get("failFast") is True
        refs: dict[str, str] = {}
        for index, group in enumerate(template["steps"]):
            if self.stopping.is_set():
                record.state, record.message = TaskState.FAILED, self._stopped_message()
                return None
            base = f"{record.name}[{index}]"
            scope = {**self.globals, **inputs, **refs}
            nodes: dict[str, list[TaskRecord]] = {}  # a step's node, or its items' nodes
            looping: set[str] = set()
            units: list[Unit] = []
            for step in group:
                name = step["name"]
                node, more, children = self._expand(f"{base}.{name}", name, step, scope)
                units += more
                if children is not None:
                    nodes[name] = children
                    looping.add(name)
                elif node is not None:
                    nodes[name] = [node]
            if self._run_all(units, limit, fail_fast=fail_fast):
                record.state, record.message = TaskState.FAILED, FAIL_FAST_MESSAGE
                return None
            steps = {s["name"]: s for s in group}
            for name, children in nodes.items():
                bad = next((c for c in children if c.state.failed), None)
                if bad is not None and not continues(steps[name], bad.state):
                    record.state = TaskState.FAILED
                    record.message = f"child '{bad.name}' failed"
                    return None
                if name in looping:
                    refs.update(aggregate("steps", name, children))
                else:
                    child_template = self.templates.get(children[0].template, {})
                    refs.update(node_refs("steps", name, children[0], child_template))
        return refs
