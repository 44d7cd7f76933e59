"""DAG templates, at any depth, as Argo's controller runs them (workflow/controller/dag.go).

A task is decided once the tasks it depends on are done: it runs when its ``depends`` (or
``dependencies``) holds over their results (``flows.local.conditions.depends``: a plain
name is Succeeded or Skipped, or Failed / Errored with ``continueOn`` set for that phase),
and is Omitted otherwise; its ``when`` is evaluated as it starts (``run_node``). With
``dag.failFast`` (true by default) the DAG ends, starting nothing more, once no node runs
and a leaf task's branch has failed, as Argo's ``assessDAGPhase`` ends it (a failure that a
``depends`` expects, or that ``continueOn`` covers, is no failed branch). A looping task is
a TaskGroup node done when all its items are. The DAG's phase is ``assessDAGPhase``'s:
Failed (or Error) when a leaf task's branch failed and that task does not continue on it.
Its nodes start through the one scheduling loop (``flows.local.nodes.schedule``).
"""

from __future__ import annotations

import re
import time
from typing import Any

from flows.local.conditions.depends import dag_phase, dependency_names, depends_says_run
from flows.local.nodes.loops import aggregate, group_state, is_loop
from flows.local.nodes.references import FAIL_FAST_MESSAGE, node_refs
from flows.local.nodes.schedule import RunNode, Unit, expand, schedule
from flows.local.records import TaskRecord, TaskState
from flows.local.state import RunState


def run_dag(
    state: RunState,
    record: TaskRecord,
    template: dict[str, Any],
    inputs: dict[str, str],
    run_node: RunNode,
) -> dict[str, str] | None:
    """Run a DAG template's tasks as the node ``record``; what ``{{tasks.*}}`` gives of
    them when it succeeded, else None (``record``'s phase and message set)."""
    dag = template["dag"]
    dag_tasks = dag.get("tasks", [])
    tasks = {t["name"]: t for t in dag_tasks}
    fail_fast = dag.get("failFast", True) is not False
    limit = int(template.get("parallelism") or 0)
    nodes: dict[str, TaskRecord] = {}
    loops: dict[str, list[TaskRecord]] = {}

    def key(name: str) -> str:
        return f"{record.name}.{name}" if record.name else name

    def refs() -> dict[str, str]:
        scope: dict[str, str] = {}
        for name, node in list(nodes.items()):
            if name in loops:
                scope.update(aggregate("tasks", name, loops[name]))
            node_template = state.templates.get(node.template, {})
            scope.update(node_refs("tasks", name, node, node_template))
        return scope

    def decide() -> list[Unit]:
        """Every task whose dependencies are done, decided: its nodes to run, or Omitted."""
        ready: list[Unit] = []
        decided = True
        while decided:
            decided = False
            for name, task in tasks.items():
                if name in nodes:
                    continue
                deps = [nodes.get(d) for d in dependency_names(task)]
                if any(d is None or not d.state.done for d in deps):
                    continue
                decided = True
                if key(name) in state.kept:
                    nodes[name] = state.records[key(name)]
                    if is_loop(task):  # its items: key(i:description), not their own nodes
                        item = re.compile(re.escape(key(name)) + r"\(\d+:[^()]*\)")
                        kept = list(state.records.items())
                        loops[name] = [r for k, r in kept if item.fullmatch(k)]
                elif depends_says_run(task, tasks, nodes, loops):
                    scope = {**state.globals, **inputs, **refs()}
                    node, units, children = expand(state, key(name), name, task, scope)
                    ready.extend(units)
                    if children is not None:
                        loops[name] = children
                        node = state.node(key(name), task["template"], "TaskGroup")
                        node.kind, node.state, node.started = (
                            "TaskGroup",
                            TaskState.RUNNING,
                            time.time(),
                        )
                    assert node is not None
                    nodes[name] = node
                else:
                    nodes[name] = state.settle(
                        key(name), task["template"], TaskState.OMITTED,
                        "omitted: depends condition not met", "Skipped",
                    )  # fmt: skip
        return ready

    def failed(running: int) -> bool:
        if template.get("failFast") is True:  # the template's, not dag.failFast: any failure
            return any(n.state.failed for n in nodes.values())
        # dag.failFast: Argo's assessDAGPhase is Running while a node runs; then it fails
        # the DAG, which starts nothing more, when a leaf task's branch failed (a
        # failure a depends expects is no such branch)
        if running:
            return False
        phases = {n: "Running" for n in tasks} | {n: r.state.phase for n, r in nodes.items()}
        return dag_phase(dag_tasks, phases) != "Succeeded"

    def finished(_: TaskRecord) -> None:
        for name, children in loops.items():
            group = nodes[name]
            if group.state is TaskState.RUNNING and all(c.state.done for c in children):
                group.state, group.finished = group_state(children), time.time()

    queue = schedule(
        state, run_node, limit, decide, lambda running: fail_fast and failed(running), finished
    )
    cut_short = bool(queue) or len(nodes) < len(tasks)
    why = state.stopped_message() if state.stopping.is_set() else "an upstream task failed"
    for unit_key, task, _ in queue:  # not started: failFast or a stop
        state.settle(unit_key, task["template"], TaskState.OMITTED, why, "Pod")
    for name, task in tasks.items():
        if name not in nodes:
            nodes[name] = state.settle(
                key(name), task["template"], TaskState.OMITTED, why, "Skipped"
            )
        elif name in loops and nodes[name].state is TaskState.RUNNING:  # cut short
            cut = any(c.state is TaskState.OMITTED for c in loops[name])
            nodes[name].state = TaskState.FAILED if cut else group_state(loops[name])
            nodes[name].finished = time.time()
    phase = TaskState(dag_phase(dag_tasks, {n: r.state.phase for n, r in nodes.items()}, fail_fast))
    if template.get("failFast") is True and cut_short and failed(0):
        record.state, record.message = TaskState.FAILED, FAIL_FAST_MESSAGE
        return None
    if phase is not TaskState.SUCCEEDED:
        record.state = phase
        record.message = state.stopped_message() if state.stopping.is_set() else ""
        return None
    return refs()
