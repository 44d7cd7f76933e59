"""One group of a steps template as it runs (argo-workflows v4.0.5 workflow/controller/
steps.go ``executeStepGroup``): a ``StepGroup`` with its steps' nodes and the methods
``run_steps`` (``flows.local.nodes.node``) calls. Its steps start side by side (at most
the template's ``parallelism`` at once; with the template's ``failFast: true``, none after
one failed); a looping step is one node per item, with no node of its own. The group fails
when one of its steps failed without ``continueOn``: then the template fails ("child '...'
failed") and no later group runs. Later groups see the steps' outputs, a loop's
aggregated.
"""

from __future__ import annotations

from typing import Any

from flows.local.conditions.continue_on import continues
from flows.local.nodes.loops import Unit, aggregate, expand
from flows.local.nodes.scope import node_refs
from flows.local.state import RunState
from flows.local.status import FAIL_FAST_MESSAGE, TaskRecord, TaskState


class StepGroup:
    """Group ``index`` of a steps template run as the node ``boundary``: each step's
    nodes (its items' when it loops) and what is left to start."""

    def __init__(
        self,
        state: RunState,
        boundary: TaskRecord,
        template: dict[str, Any],
        index: int,
        scope: dict[str, str],
    ) -> None:
        self.state = state
        self.steps = {s["name"]: s for s in template["steps"][index]}
        self.limit = int(template.get("parallelism") or 0)  # nodes at once; 0: no limit
        self.fail_fast = template.get("failFast") is True
        self.nodes: dict[str, list[TaskRecord]] = {}  # a step's node, or its items' nodes
        self.looping: set[str] = set()
        self.failed: list[str] = []
        self._units: list[Unit] = []
        base = f"{boundary.name}[{index}]"
        for name, step in self.steps.items():
            node, units, items = expand(state, f"{base}.{name}", name, step, scope)
            self._units += units
            if items is not None:
                self.nodes[name] = items
                self.looping.add(name)
            elif node is not None:
                self.nodes[name] = [node]

    # --- the scheduling loop's calls -------------------------------------------------------
    def ready(self) -> list[Unit]:
        """Every step's nodes, once: a group's steps all start together."""
        units, self._units = self._units, []
        return units

    def cut_short(self) -> bool:
        """The template's ``failFast``: none starts after one failed (``continueOn`` or
        not, as Argo counts them)."""
        return bool(self.failed)

    def finished(self, record: TaskRecord) -> None:
        if record.state.failed and self.fail_fast:
            self.failed.append(record.name)

    # --- the end ---------------------------------------------------------------------------
    def end(self, unstarted: list[Unit]) -> bool:
        """What never started Omitted; whether failFast left some unstarted."""
        why = FAIL_FAST_MESSAGE if self.failed else self.state.stopped_message()
        for key, step, _ in unstarted:  # not started: failFast or a stop
            self.state.settle(key, step["template"], TaskState.OMITTED, why, "Pod")
        return bool(self.failed and unstarted)

    def failure(self) -> TaskRecord | None:
        """The node whose failure fails the group (its step has no ``continueOn`` for it)."""
        for name, nodes in self.nodes.items():
            bad = next((n for n in nodes if n.state.failed), None)
            if bad is not None and not continues(self.steps[name], bad.state):
                return bad
        return None

    def refs(self) -> dict[str, str]:
        """What ``{{steps.NAME.*}}`` gives of this group's steps to later groups."""
        refs: dict[str, str] = {}
        for name, nodes in self.nodes.items():
            if name in self.looping:
                refs.update(aggregate("steps", name, nodes))
            else:
                template = self.state.templates.get(nodes[0].template, {})
                refs.update(node_refs("steps", name, nodes[0], template))
        return refs
