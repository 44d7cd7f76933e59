"""One DAG template's run, held as Argo's controller holds it (argo-workflows v4.0.5
workflow/controller/dag.go): a ``DagContext`` with the template's tasks and the node each
decided task has, and the methods ``run_dag`` (``flows.local.nodes.node``) calls.

- ``ready`` is ``executeDAGTask`` over the tasks: every task whose dependencies are done is
  decided once: it runs when its ``depends`` (or ``dependencies``) holds over their results
  (``flows.local.conditions.depends``: a plain name is Succeeded or Skipped, or Failed /
  Errored with ``continueOn`` set for that phase), and is Omitted otherwise; its ``when``
  is evaluated as it starts (``run_node``). A looping task is a TaskGroup node holding its
  items' nodes (``children``), done when all of them are.
- Every task so decided starts before the DAG's phase is judged, as ``executeDAG`` runs
  ``executeDAGTask`` on every target task before ``assessDAGPhase``: a failure elsewhere
  never Omits a task whose dependencies were met. ``dag.failFast`` (true by default) only
  changes which failure the phase reports; the template's own ``failFast: true`` starts no
  task after any failed (``checkParallelism``).
- ``end`` is ``assessDAGPhase``: Failed (or Error) when a leaf task's branch failed and that
  task does not continue on it; the tasks never started are Omitted.
"""

from __future__ import annotations

import time
from typing import Any

from flows.local.conditions.depends import dag_phase, dependency_names, depends_says_run
from flows.local.nodes.loops import Unit, aggregate, expand, group_state
from flows.local.nodes.scope import node_refs
from flows.local.state import RunState
from flows.local.status import FAIL_FAST_MESSAGE, TaskRecord, TaskState


class DagContext:
    """One DAG template run as the node ``boundary`` (Argo's ``dagContext``): its tasks by
    name, and ``nodes``, the node of each task decided so far."""

    def __init__(
        self,
        state: RunState,
        boundary: TaskRecord,
        template: dict[str, Any],
        inputs: dict[str, str],
    ) -> None:
        self.state, self.boundary, self.inputs = state, boundary, inputs
        self.tasks: dict[str, dict[str, Any]] = {
            t["name"]: t for t in template["dag"].get("tasks", [])
        }
        self.limit = int(template.get("parallelism") or 0)  # nodes at once; 0: no limit
        self.fail_fast = template["dag"].get("failFast", True) is not False
        self.template_fail_fast = template.get("failFast") is True
        self.nodes: dict[str, TaskRecord] = {}

    def key(self, name: str) -> str:
        """The node key of task ``name`` (Argo's ``taskNodeName``)."""
        return f"{self.boundary.name}.{name}" if self.boundary.name else name

    def items(self, name: str) -> list[TaskRecord]:
        """A looping task's items' nodes (empty for any other task)."""
        return [self.state.tasks[k] for k in self.nodes[name].children if k in self.state.tasks]

    def refs(self) -> dict[str, str]:
        """What ``{{tasks.NAME.*}}`` gives of every decided task (a loop's aggregated)."""
        scope: dict[str, str] = {}
        for name, node in list(self.nodes.items()):
            if node.children:
                scope.update(aggregate("tasks", name, self.items(name)))
            template = self.state.templates.get(node.template, {})
            scope.update(node_refs("tasks", name, node, template))
        return scope

    # --- the scheduling loop's calls -------------------------------------------------------
    def ready(self) -> list[Unit]:
        """Every task whose dependencies are done, decided (an Omitted one may decide those
        below it, so until none is left): the nodes to run for it."""
        units: list[Unit] = []
        decided = True
        while decided:
            decided = False
            for name, task in self.tasks.items():
                if name in self.nodes or not self._dependencies_done(task):
                    continue
                decided = True
                units += self._decide(name, task)
        return units

    def cut_short(self) -> bool:
        """The template's ``failFast: true``: no task starts once any has failed."""
        return self.template_fail_fast and any(n.state.failed for n in self.nodes.values())

    def finished(self, record: TaskRecord) -> None:
        """A node ended: a TaskGroup whose items all ended takes their phase."""
        for name, group in list(self.nodes.items()):
            items = self.items(name)
            if (
                group.children
                and group.state is TaskState.RUNNING
                and items
                and all(c.state.done for c in items)
            ):
                group.state, group.finished = group_state(items), time.time()

    # --- the end ---------------------------------------------------------------------------
    def end(self, unstarted: list[Unit]) -> dict[str, str] | None:
        """The DAG's end: what never started Omitted, its phase on ``boundary``; what
        ``{{tasks.*}}`` gives when it succeeded, else None."""
        state = self.state
        cut_short = bool(unstarted) or len(self.nodes) < len(self.tasks)
        why = state.stopped_message() if state.stopping.is_set() else "an upstream task failed"
        for unit_key, task, _ in unstarted:  # not started: failFast or a stop
            state.settle(unit_key, task["template"], TaskState.OMITTED, why, "Pod")
        for name, task in self.tasks.items():
            if name not in self.nodes:
                self.nodes[name] = state.settle(
                    self.key(name), task["template"], TaskState.OMITTED, why, "Skipped"
                )
            elif self.nodes[name].children and self.nodes[name].state is TaskState.RUNNING:
                items = self.items(name)  # cut short
                cut = any(c.state is TaskState.OMITTED for c in items)
                self.nodes[name].state = TaskState.FAILED if cut else group_state(items)
                self.nodes[name].finished = time.time()
        phases = {n: r.state.phase for n, r in self.nodes.items()}
        phase = TaskState(dag_phase(list(self.tasks.values()), phases, self.fail_fast))
        if self.template_fail_fast and cut_short and self.cut_short():
            self.boundary.state, self.boundary.message = TaskState.FAILED, FAIL_FAST_MESSAGE
            return None
        if phase is not TaskState.SUCCEEDED:
            self.boundary.state = phase
            self.boundary.message = state.stopped_message() if state.stopping.is_set() else ""
            return None
        return self.refs()

    # --- one task ----------------------------------------------------------------------------
    def _dependencies_done(self, task: dict[str, Any]) -> bool:
        nodes = [self.nodes.get(d) for d in dependency_names(task)]
        return all(n is not None and n.state.done for n in nodes)

    def _decide(self, name: str, task: dict[str, Any]) -> list[Unit]:
        """Task ``name``, its dependencies done: kept from the earlier run, Omitted, or its
        node (a loop's TaskGroup) and the units to run."""
        key, state = self.key(name), self.state
        if key in state.kept:  # resumed: it succeeded before, its items with it
            self.nodes[name] = state.tasks[key]
            return []
        loops = {n: self.items(n) for n, node in self.nodes.items() if node.children}
        if not depends_says_run(task, self.tasks, self.nodes, loops):
            self.nodes[name] = state.settle(
                key, task["template"], TaskState.OMITTED,
                "omitted: depends condition not met", "Skipped",
            )  # fmt: skip
            return []
        scope = {**state.globals, **self.inputs, **self.refs()}
        node, units, items = expand(state, key, name, task, scope)
        if items is not None:  # Argo's TaskGroup node: done when all its items are
            node = state.node(key, task["template"], "TaskGroup")
            node.kind, node.state, node.started = "TaskGroup", TaskState.RUNNING, time.time()
            node.children = [item.name for item in items]
        assert node is not None
        self.nodes[name] = node
        return units
