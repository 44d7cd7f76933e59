"""The nodes of a local run below its root, as Argo's controller makes them: a DAG task or
a step runs its template as one node (a pod, or a DAG or steps node holding more), or as one
node per item when it loops (``flows.local.loops``). The DAG and steps templates themselves
run in ``flows.local.dag`` and ``flows.local.steps``; this module holds what they share: the
node records, starting nodes on threads under a template's ``parallelism``, ``continueOn``,
what ``{{tasks.NAME.*}}`` / ``{{steps.NAME.*}}`` give, and a template's outputs taken from its
tasks through ``valueFrom.parameter``. A mixin of ``LocalRunner``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from flows.local.checks import UnsupportedFeature, evaluate_tag, substitute
from flows.local.expr_syntax import ExpressionError
from flows.local.gates import skipped_outputs
from flows.local.loops import (
    LoopError,
    is_loop,
    item_scope,
    loop_items,
    node_name,
)
from flows.local.records import TaskRecord, TaskState
from flows.local.signals import STOP_MESSAGE

Unit = tuple[str, dict[str, Any], dict[str, str]]  # node key, task or step, its scope
FAIL_FAST_MESSAGE = "template has failed or errored children and failFast enabled"
MAX_THREADS = 4096  # no template parallelism: every ready node at once, as Argo


def continues(task: Mapping[str, Any], state: TaskState) -> bool:
    """Argo's ``ContinuesOn``: the failure of this task or step does not stop its parent."""
    flags = task.get("continueOn") or {}
    return (state is TaskState.FAILED and bool(flags.get("failed"))) or (
        state is TaskState.ERROR and bool(flags.get("error"))
    )


def node_refs(
    prefix: str, name: str, record: TaskRecord, template: Mapping[str, Any]
) -> dict[str, str]:
    """What ``{{tasks.NAME.*}}`` / ``{{steps.NAME.*}}`` give for one node (``template``:
    its template, whose output defaults stand in when the node was Skipped or Omitted)."""
    base = f"{prefix}.{name}"
    refs = skipped_outputs(base, record, template)
    refs.update({f"{base}.outputs.parameters.{k}": v for k, v in record.outputs.items()})
    if record.result is not None:
        refs[f"{base}.outputs.result"] = record.result
    if record.exit_code is not None:
        refs[f"{base}.exitCode"] = str(record.exit_code)
    refs[f"{base}.status"] = record.state.phase
    return refs


def composite_outputs(template: Mapping[str, Any], scope: Mapping[str, str]) -> dict[str, str]:
    """A DAG or steps template's output parameters: ``valueFrom.parameter`` resolved, or
    ``valueFrom.expression`` evaluated (Argo's ``resolveParameter``), in the scope of its
    finished tasks; ``valueFrom.default`` when that has no value."""
    values: dict[str, str] = {}
    for parameter in template.get("outputs", {}).get("parameters", []):
        source = parameter.get("valueFrom") or {}
        try:
            if "expression" in source:
                values[parameter["name"]] = evaluate_tag(str(source["expression"]), scope)
                continue
            if "parameter" not in source:
                raise UnsupportedFeature(
                    f"output parameter {parameter['name']}: a DAG or steps template's output "
                    "needs valueFrom.parameter or valueFrom.expression"
                )
            values[parameter["name"]] = substitute(str(source["parameter"]), scope)
        except (UnsupportedFeature, ExpressionError):
            if "default" not in source:
                raise
            values[parameter["name"]] = str(source["default"])
    return values


class NodeExecution:
    tasks: dict[str, TaskRecord]
    templates: dict[str, dict[str, Any]]
    globals: dict[str, str]
    lock: threading.Lock
    stopping: threading.Event
    deadline_passed: threading.Event
    kept: set[str]
    handler: Any
    on_change: Any
    save_state: Callable[[], None]
    _run_task: Callable[..., None]
    _run_dag: Callable[..., dict[str, str] | None]
    _run_steps: Callable[..., dict[str, str] | None]

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
        return record

    def _changed(self) -> None:
        """Nodes started or finished: the state on disk and the view follow."""
        self.save_state()
        self.on_change(self)

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
        except (UnsupportedFeature, ExpressionError) as exc:
            record.state, record.message = TaskState.ERROR, str(exc)
            return
        record.state, record.message = TaskState.SUCCEEDED, ""

    def _launch(
        self, pool: ThreadPoolExecutor, running: dict[Future, str], unit: Unit, limit: int
    ) -> bool:
        if limit and len(running) >= limit:
            return False
        key, task, scope = unit
        if key not in self.kept:  # a kept node keeps its phase; _run_unit skips it
            self._node(key, task["template"]).state = TaskState.RUNNING
        running[pool.submit(self._run_unit, key, task, scope)] = key
        return True

    def _expand(
        self, key: str, name: str, task: dict[str, Any], scope: dict[str, str]
    ) -> tuple[TaskRecord | None, list[Unit], list[TaskRecord] | None]:
        """A task's node and what to run for it: itself, or one node per item (its
        children, and no node of its own: a DAG adds its TaskGroup); a loop that cannot
        expand is an Error node, an empty one Skipped."""
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
        return None, units, children

    def _run_all(self, units: list[Unit], limit: int, fail_fast: bool = False) -> bool:
        """A step group's nodes side by side, at most ``limit`` at once (0: no limit). With
        the template's ``failFast``, none starts after one failed (``continueOn`` or not, as
        Argo counts them); returns whether that left some unstarted."""
        running: dict[Future, str] = {}
        queue = list(units)
        failed: list[str] = []
        with ThreadPoolExecutor(max_workers=limit or MAX_THREADS) as pool:
            try:
                while queue or running:
                    while queue and not self.stopping.is_set() and not failed:
                        if not self._launch(pool, running, queue[0], limit):
                            break
                        queue.pop(0)
                    self._changed()  # once per batch: a save writes every node
                    if not running:
                        break
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        running.pop(future)
                        if future.result().state.failed and fail_fast:
                            failed.append(future.result().name)
            except BaseException:
                self.stopping.set()
                self.handler.interrupt()
                raise
        why = FAIL_FAST_MESSAGE if failed else self._stopped_message()
        for key, step, _ in queue:  # not started: failFast or a stop
            self._settle(key, step["template"], TaskState.OMITTED, why, "Pod")
        return bool(failed and queue)
