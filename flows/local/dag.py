"""DAG templates, at any depth, as Argo's controller runs them (workflow/controller/dag.go).

A task is decided once the tasks it depends on are done: it runs when its ``depends`` (or
``dependencies``) holds over their results (``flows.local.conditions``: a plain name is
Succeeded or Skipped, or Failed / Errored with ``continueOn`` set for that phase), and is
Omitted otherwise; its ``when`` is evaluated as it starts (``flows.local.gates``). With
``dag.failFast`` (true by default) the DAG ends, starting nothing more, once no node runs
and a leaf task's branch has failed, as Argo's ``assessDAGPhase`` ends it (a failure that a
``depends`` expects, or that ``continueOn`` covers, is no failed branch). A looping task is
a TaskGroup node done when all its items are. The DAG's phase is ``assessDAGPhase``'s:
Failed (or Error) when a leaf task's branch failed and that task does not continue on it.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from flows.local.conditions import dag_phase, dependency_names
from flows.local.gates import depends_says_run
from flows.local.loops import aggregate, group_state, is_loop
from flows.local.nodes import (
    FAIL_FAST_MESSAGE,
    MAX_THREADS,
    NodeExecution,
    Unit,
    node_refs,
)
from flows.local.records import TaskRecord, TaskState


class DagExecution(NodeExecution):
    def _run_dag(
        self, record: TaskRecord, template: dict[str, Any], inputs: dict[str, str]
    ) -> dict[str, str] | None:
        dag = template["dag"]
        dag_tasks = dag.get("tasks", [])
        tasks = {t["name"]: t for t in dag_tasks}
        fail_fast = dag.get("failFast", True) is not False
        limit = int(template.get("parallelism") or 0)
        nodes: dict[str, TaskRecord] = {}
        loops: dict[str, list[TaskRecord]] = {}
        queue: list[Unit] = []
        running: dict[Future, str] = {}

        def key(name: str) -> str:
            return f"{record.name}.{name}" if record.name else name

        def refs() -> dict[str, str]:
            scope: dict[str, str] = {}
            for name, node in list(nodes.items()):
                if name in loops:
                    scope.update(aggregate("tasks", name, loops[name]))
                node_template = self.templates.get(node.template, {})
                scope.update(node_refs("tasks", name, node, node_template))
            return scope

        def decide() -> bool:
            decided = False
            for name, task in tasks.items():
                if name in nodes:
                    continue
                deps = [nodes.get(d) for d in dependency_names(task)]
                if any(d is None or not d.state.done for d in deps):
                    continue
                decided = True
                if key(name) in self.kept:
                    nodes[name] = self.tasks[key(name)]
                    if is_loop(task):  # its items: key(i:description), not their own nodes
                        item = re.compile(re.escape(key(name)) + r"\(\d+:[^()]*\)")
                        kept = list(self.tasks.items())
                        loops[name] = [r for k, r in kept if item.fullmatch(k)]
                elif depends_says_run(task, tasks, nodes, loops):
                    scope = {**self.globals, **inputs, **refs()}
                    node, units, children = self._expand(key(name), name, task, scope)
                    queue.extend(units)
                    if children is not None:
                        loops[name] = children
                        node = self._node(key(name), task["template"], "TaskGroup")
                        node.kind, node.state, node.started = (
                            "TaskGroup",
                            TaskState.RUNNING,
                            time.time(),
                        )
                    assert node is not None
                    nodes[name] = node
                else:
                    nodes[name] = self._settle(
                        key(name), task["template"], TaskState.OMITTED,
                        "omitted: depends condition not met", "Skipped",
                    )  # fmt: skip
            return decided

        def failed() -> bool:
            if template.get("failFast") is True:  # the template's, not dag.failFast: any failure
                return any(n.state.failed for n in nodes.values())
            # dag.failFast: Argo's assessDAGPhase is Running while a node runs; then it fails
            # the DAG, which starts nothing more, when a leaf task's branch failed (a
            # failure a depends expects is no such branch)
            if running:
                return False
            phases = {n: "Running" for n in tasks} | {n: r.state.phase for n, r in nodes.items()}
            return dag_phase(dag_tasks, phases) != "Succeeded"

        with ThreadPoolExecutor(max_workers=limit or MAX_THREADS) as pool:
            try:
                changed = False
                while True:
                    if not self.stopping.is_set() and not (fail_fast and failed()):
                        while decide():
                            pass
                        started = len(running)
                        while queue and self._launch(pool, running, queue[0], limit):
                            queue.pop(0)
                        changed = changed or len(running) > started
                    if changed:  # once per batch: a save writes every node
                        self._changed()
                        changed = False
                    if not running:
                        break
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        running.pop(future)
                        future.result()
                    changed = True
                    for name, children in loops.items():
                        group = nodes[name]
                        if group.state is TaskState.RUNNING and all(c.state.done for c in children):
                            group.state, group.finished = group_state(children), time.time()
            except BaseException:
                # Ctrl-C: stop the processes first, or the pool would wait for them.
                self.stopping.set()
                self.handler.interrupt()
                raise
        cut_short = bool(queue) or len(nodes) < len(tasks)
        why = self._stopped_message() if self.stopping.is_set() else "an upstream task failed"
        for unit_key, task, _ in queue:  # not started: failFast or a stop
            self._settle(unit_key, task["template"], TaskState.OMITTED, why, "Pod")
        for name, task in tasks.items():
            if name not in nodes:
                nodes[name] = self._settle(
                    key(name), task["template"], TaskState.OMITTED, why, "Skipped"
                )
            elif name in loops and nodes[name].state is TaskState.RUNNING:  # cut short
                cut = any(c.state is TaskState.OMITTED for c in loops[name])
                nodes[name].state = TaskState.FAILED if cut else group_state(loops[name])
                nodes[name].finished = time.time()
        phase = TaskState(
            dag_phase(dag_tasks, {n: r.state.phase for n, r in nodes.items()}, fail_fast)
        )
        if template.get("failFast") is True and cut_short and failed():
            record.state, record.message = TaskState.FAILED, FAIL_FAST_MESSAGE
            return None
        if phase is not TaskState.SUCCEEDED:
            record.state = phase
            record.message = self._stopped_message() if self.stopping.is_set() else ""
            return None
        return refs()
