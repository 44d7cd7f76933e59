"""DAG and steps templates at any depth, run as Argo's controller runs them
(workflow/controller/dag.go and steps.go). A mixin of ``LocalRunner``.

A DAG starts each task once the tasks it depends on are done: it runs when each of them
Succeeded or was Skipped, or Failed / Errored with ``continueOn`` set for that phase, and is
Omitted otherwise. After a failure that does not continue, ``dag.failFast`` (true by
default) starts nothing new. Its phase is Argo's ``assessDAGPhase``: Failed when a leaf
task's branch failed and that task does not continue on it. A steps template runs its groups
in order, the steps of a group side by side; a group fails when one of its steps failed
without ``continueOn``, and then the template fails and no later group runs. Looping tasks
and steps expand into one node per item (``flows.local.loops``); template ``parallelism``
limits the nodes of one DAG or step group running at once. The outputs of a DAG or steps
template come from its tasks through ``valueFrom.parameter``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from flows.local.checks import UnsupportedFeature, substitute
from flows.local.loops import (
    LoopError,
    aggregate,
    group_state,
    is_loop,
    item_scope,
    loop_items,
    node_name,
)
from flows.local.records import TaskRecord, TaskState
from flows.local.signals import STOP_MESSAGE

Unit = tuple[str, dict[str, Any], dict[str, str]]  # node key, task or step, its scope
MAX_THREADS = 4096  # no template parallelism: every ready node at once, as Argo


def task_dependencies(task: Mapping[str, Any]) -> list[str]:
    deps = list(task.get("dependencies", []))
    if task.get("depends"):
        deps += [d.strip() for d in task["depends"].split("&&")]
    return deps


def continues(task: Mapping[str, Any], state: TaskState) -> bool:
    """Argo's ``ContinuesOn``: the failure of this task or step does not stop its parent."""
    flags = task.get("continueOn") or {}
    return (state is TaskState.FAILED and bool(flags.get("failed"))) or (
        state is TaskState.ERROR and bool(flags.get("error"))
    )


def node_refs(prefix: str, name: str, record: TaskRecord) -> dict[str, str]:
    """What ``{{tasks.NAME.*}}`` / ``{{steps.NAME.*}}`` give for one node."""
    base = f"{prefix}.{name}"
    refs = {f"{base}.outputs.parameters.{k}": v for k, v in record.outputs.items()}
    if record.result is not None:
        refs[f"{base}.outputs.result"] = record.result
    if record.exit_code is not None:
        refs[f"{base}.exitCode"] = str(record.exit_code)
    refs[f"{base}.status"] = "Succeeded" if record.state.done_ok else record.state.value
    return refs


def composite_outputs(template: Mapping[str, Any], scope: Mapping[str, str]) -> dict[str, str]:
    """A DAG or steps template's output parameters: ``valueFrom.parameter`` resolved in the
    scope of its finished tasks, ``valueFrom.default`` when that has no value."""
    values: dict[str, str] = {}
    for parameter in template.get("outputs", {}).get("parameters", []):
        source = parameter.get("valueFrom") or {}
        try:
            if "parameter" not in source:
                raise UnsupportedFeature(
                    f"output parameter {parameter['name']}: a DAG or steps template's output "
                    "needs valueFrom.parameter"
                )
            values[parameter["name"]] = substitute(str(source["parameter"]), scope)
        except UnsupportedFeature:
            if "default" not in source:
                raise
            values[parameter["name"]] = str(source["default"])
    return values


class CompositeExecution:
    tasks: dict[str, TaskRecord]
    globals: dict[str, str]
    lock: threading.Lock
    stopping: threading.Event
    deadline_passed: threading.Event
    kept: set[str]
    handler: Any
    on_change: Any
    save_state: Callable[[], None]
    _run_task: Callable[..., None]

    # --- nodes -----------------------------------------------------------------------------
    def _node(self, key: str, template: str, kind: str = "Pod") -> TaskRecord:
        with self.lock:
            record = self.tasks.get(key)
            if record is None:
                record = self.tasks[key] = TaskRecord(key, template, kind=kind)
            return record

    def _settle(
        self, key: str, template: str, state: TaskState, message: str, kind: str
    ) -> TaskRecord:
        """A node that runs nothing: Omitted, Skipped or Error."""
        record = self._node(key, template, kind)
        record.state, record.message, record.kind = state, message, kind
        record.finished = time.time()
        return record

    def _run_unit(self, key: str, task: dict[str, Any], scope: dict[str, str]) -> TaskRecord:
        record = self._node(key, task["template"])
        if key in self.kept:  # resumed: it succeeded before
            return record
        record.state = TaskState.RUNNING
        self._run_task(task, record, scope)
        self.save_state()
        self.on_change(self)
        return record

    def _stopped_message(self) -> str:
        return "Step exceeded its deadline" if self.deadline_passed.is_set() else STOP_MESSAGE

    def _run_composite(
        self, record: TaskRecord, template: dict[str, Any], inputs: dict[str, str]
    ) -> None:
        """Run a DAG or steps template's nodes; its outputs and phase go to ``record``."""
        record.kind = "DAG" if "dag" in template else "Steps"
        run = self._run_dag if "dag" in template else self._run_steps
        refs = run(record, template, inputs)
        if refs is None:
            return  # failed; the phase and message are set
        try:
            record.outputs = composite_outputs(template, {**self.globals, **inputs, **refs})
        except UnsupportedFeature as exc:
            record.state, record.message = TaskState.ERROR, str(exc)
            return
        record.state, record.message = TaskState.SUCCEEDED, ""

    def _launch(
        self, pool: ThreadPoolExecutor, running: dict[Future, str], unit: Unit, limit: int
    ) -> bool:
        if limit and len(running) >= limit:
            return False
        key, task, scope = unit
        self._node(key, task["template"]).state = TaskState.RUNNING
        running[pool.submit(self._run_unit, key, task, scope)] = key
        return True

    def _expand(
        self, key: str, name: str, task: dict[str, Any], scope: dict[str, str]
    ) -> tuple[TaskRecord, list[Unit], list[TaskRecord] | None]:
        """A task's node and what to run for it: itself, or one node per item (its
        children); a loop that cannot expand is an Error node, an empty one Skipped."""
        if not is_loop(task):
            return self._node(key, task["template"]), [(key, task, scope)], None
        try:
            items = loop_items(task, scope)
        except (LoopError, UnsupportedFeature) as exc:
            return (
                self._settle(key, task["template"], TaskState.ERROR, str(exc), "Skipped"),
                [],
                None,
            )
        if not items:
            record = self._settle(
                key, task["template"], TaskState.SKIPPED, "Skipped, empty params", "Skipped"
            )
            return record, [], None
        units: list[Unit] = []
        children = []
        parent = key[: -len(name)]
        for index, item in enumerate(items):
            child = parent + node_name(name, index, item)
            children.append(self._node(child, task["template"]))
            units.append((child, task, {**scope, **item_scope(item)}))
        return self._node(key, task["template"]), units, children

    # --- DAG -------------------------------------------------------------------------------
    def _run_dag(
        self, record: TaskRecord, template: dict[str, Any], inputs: dict[str, str]
    ) -> dict[str, str] | None:
        dag = template["dag"]
        tasks = {t["name"]: t for t in dag.get("tasks", [])}
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
                scope.update(node_refs("tasks", name, node))
            return scope

        def decide() -> bool:
            decided = False
            for name, task in tasks.items():
                if name in nodes:
                    continue
                deps = [nodes.get(d) for d in task_dependencies(task)]
                if any(d is None or not d.state.done for d in deps):
                    continue
                decided = True
                if key(name) in self.kept:
                    nodes[name] = self.tasks[key(name)]
                    kept = list(self.tasks.items())
                    loops[name] = [r for k, r in kept if k.startswith(key(name) + "(")]
                elif all(self._satisfies(tasks[d], nodes[d]) for d in task_dependencies(task)):
                    scope = {**self.globals, **inputs, **refs()}
                    nodes[name], units, children = self._expand(key(name), name, task, scope)
                    queue.extend(units)
                    if children is not None:
                        loops[name] = children
                        nodes[name].kind, nodes[name].state = "TaskGroup", TaskState.RUNNING
                        nodes[name].started = time.time()
                else:
                    nodes[name] = self._settle(
                        key(name), task["template"], TaskState.OMITTED,
                        "omitted: depends condition not met", "Skipped",
                    )  # fmt: skip
            return decided

        def failed() -> bool:
            return any(
                n.state.failed and not continues(tasks[t], n.state) for t, n in nodes.items()
            )

        with ThreadPoolExecutor(max_workers=limit or MAX_THREADS) as pool:
            try:
                while True:
                    if not self.stopping.is_set() and not (fail_fast and failed()):
                        while decide():
                            pass
                        while queue and self._launch(pool, running, queue[0], limit):
                            queue.pop(0)
                    if not running:
                        break
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        running.pop(future)
                        future.result()
                    for name, children in loops.items():
                        group = nodes[name]
                        if group.state is TaskState.RUNNING and all(c.state.done for c in children):
                            group.state, group.finished = group_state(children), time.time()
            except BaseException:
                # Ctrl-C: stop the processes first, or the pool would wait for them.
                self.stopping.set()
                self.handler.interrupt()
                raise
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
        phase = self._dag_phase(tasks, nodes, fail_fast)
        if phase is not TaskState.SUCCEEDED:
            record.state = phase
            record.message = self._stopped_message() if self.stopping.is_set() else ""
            return None
        return refs()

    def _satisfies(self, task: dict[str, Any], node: TaskRecord) -> bool:
        """A plain dependency: ``(T.Succeeded || T.Skipped || T.Daemoned)``, with ``T.Failed``
        / ``T.Errored`` added when T continues on them (Argo's ``expandDependency``)."""
        return node.state.done_ok or node.state is TaskState.SKIPPED or continues(task, node.state)

    @staticmethod
    def _dag_phase(
        tasks: dict[str, dict[str, Any]], nodes: dict[str, TaskRecord], fail_fast: bool
    ) -> TaskState:
        """Argo's ``assessDAGPhase``: each leaf task's branch phase (its own when it ran,
        else its dependencies', a failure first); Failed when one failed and does not
        continue on it."""
        depended = {d for t in tasks.values() for d in task_dependencies(t)}

        def branch(name: str) -> TaskState:
            node = nodes[name]
            if node.state.done_ok:
                return TaskState.SUCCEEDED
            if node.state.failed:
                return node.state
            parents = [branch(d) for d in task_dependencies(tasks[name])]
            return next((p for p in parents if p.failed), TaskState.SUCCEEDED)

        result = TaskState.SUCCEEDED
        for name in sorted(n for n in tasks if n not in depended):
            phase = branch(name)
            if phase.failed and not continues(tasks[name], phase):
                result = phase
                if fail_fast:
                    break
        return result

    # --- steps -----------------------------------------------------------------------------
    def _run_steps(
        self, record: TaskRecord, template: dict[str, Any], inputs: dict[str, str]
    ) -> dict[str, str] | None:
        limit = int(template.get("parallelism") or 0)
        refs: dict[str, str] = {}
        for index, group in enumerate(template["steps"]):
            if self.stopping.is_set():
                record.state, record.message = TaskState.FAILED, self._stopped_message()
                return None
            base = f"{record.name}[{index}]"
            scope = {**self.globals, **inputs, **refs}
            nodes: dict[str, TaskRecord] = {}
            loops: dict[str, list[TaskRecord]] = {}
            units: list[Unit] = []
            for step in group:
                name = step["name"]
                nodes[name], more, children = self._expand(f"{base}.{name}", name, step, scope)
                units += more
                if children is not None:
                    loops[name] = children
            self._run_all(units, limit)
            steps = {s["name"]: s for s in group}
            for name, node in nodes.items():
                children = loops.get(name, [node])
                bad = next((c for c in children if c.state.failed), None)
                if bad is not None and not continues(steps[name], bad.state):
                    record.state = TaskState.FAILED
                    record.message = f"child '{bad.name}' failed"
                    return None
                if name in loops:
                    refs.update(aggregate("steps", name, children))
                    node.state = group_state(children)  # not a node in Argo: steps keep no group
                    with self.lock:
                        self.tasks.pop(node.name, None)
                else:
                    refs.update(node_refs("steps", name, node))
        return refs

    def _run_all(self, units: list[Unit], limit: int) -> None:
        """A step group's nodes side by side, at most ``limit`` at once (0: no limit)."""
        running: dict[Future, str] = {}
        queue = list(units)
        with ThreadPoolExecutor(max_workers=limit or MAX_THREADS) as pool:
            try:
                while queue or running:
                    while queue and not self.stopping.is_set():
                        if not self._launch(pool, running, queue[0], limit):
                            break
                        queue.pop(0)
                    if not running:
                        break
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        running.pop(future)
                        future.result()
            except BaseException:
                self.stopping.set()
                self.handler.interrupt()
                raise
        for key, step, _ in queue:  # not started: a stop
            self._settle(key, step["template"], TaskState.OMITTED, self._stopped_message(), "Pod")
