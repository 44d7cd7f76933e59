"""Steps templates, at any depth, as Argo's controller runs them (workflow/controller/
steps.go): the groups in order, the steps of a group side by side (at most the template's
``parallelism`` at once). A group fails when one of its steps failed without ``continueOn``;
then the template fails ("child '...' failed") and no later group runs. A looping step is one
node per item, with no node of its own; later groups see the items' outputs aggregated.
With the template's ``failFast: true``, no step of a group starts after one failed. A
group's steps start through the one scheduling loop (``flows.local.nodes.schedule``).
"""

from __future__ import annotations

from typing import Any

from flows.local.nodes.loops import aggregate
from flows.local.nodes.references import FAIL_FAST_MESSAGE, continues, node_refs
from flows.local.nodes.schedule import RunNode, Unit, expand, schedule
from flows.local.records import TaskRecord, TaskState
from flows.local.state import RunState


def run_steps(
    state: RunState,
    record: TaskRecord,
    template: dict[str, Any],
    inputs: dict[str, str],
    run_node: RunNode,
) -> dict[str, str] | None:
    """Run a steps template's groups as the node ``record``; what ``{{steps.*}}`` gives of
    its steps when it succeeded, else None (``record``'s phase and message set)."""
    limit = int(template.get("parallelism") or 0)
    fail_fast = template.get("failFast") is True
    refs: dict[str, str] = {}
    for index, group in enumerate(template["steps"]):
        if state.stopping.is_set():
            record.state, record.message = TaskState.FAILED, state.stopped_message()
            return None
        base = f"{record.name}[{index}]"
        scope = {**state.globals, **inputs, **refs}
        nodes: dict[str, list[TaskRecord]] = {}  # a step's node, or its items' nodes
        looping: set[str] = set()
        units: list[Unit] = []
        for step in group:
            name = step["name"]
            node, more, children = expand(state, f"{base}.{name}", name, step, scope)
            units += more
            if children is not None:
                nodes[name] = children
                looping.add(name)
            elif node is not None:
                nodes[name] = [node]
        if _run_group(state, run_node, units, limit, fail_fast):
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
                child_template = state.templates.get(children[0].template, {})
                refs.update(node_refs("steps", name, children[0], child_template))
    return refs


def _run_group(
    state: RunState, run_node: RunNode, units: list[Unit], limit: int, fail_fast: bool
) -> bool:
    """A step group's nodes side by side, at most ``limit`` at once (0: no limit). With
    the template's ``failFast``, none starts after one failed (``continueOn`` or not, as
    Argo counts them); returns whether that left some unstarted."""
    pending = list(units)
    failed: list[str] = []

    def ready() -> list[Unit]:
        given = pending[:]
        pending.clear()
        return given

    def finished(node: TaskRecord) -> None:
        if node.state.failed and fail_fast:
            failed.append(node.name)

    queue = schedule(state, run_node, limit, ready, lambda running: bool(failed), finished)
    why = FAIL_FAST_MESSAGE if failed else state.stopped_message()
    for key, step, _ in queue:  # not started: failFast or a stop
        state.settle(key, step["template"], TaskState.OMITTED, why, "Pod")
    return bool(failed and queue)
