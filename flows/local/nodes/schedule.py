"""The one scheduling loop of a local run: the nodes of a DAG or of a step group started on
threads as they become ready, at most the template's ``parallelism`` at once, until none
runs and none is ready; nothing more starts once the caller says the template is cut short
(``failFast``, a stop, the workflow's deadline). Both ``flows.local.nodes.dag`` and
``flows.local.nodes.step_groups`` run their nodes through it, as Argo's controller runs
both kinds through one ``executeTemplate`` per node. Also here: a task or step made into
its node, or one node per item when it loops (``flows.local.nodes.loops``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from flows.local.errors import LoopError, UnsupportedFeature
from flows.local.nodes.loops import is_loop, item_scope, loop_items, node_name
from flows.local.records import TaskRecord, TaskState
from flows.local.state import RunState

Unit = tuple[str, dict[str, Any], dict[str, str]]  # node key, task or step, its scope
# run one node: (run state, the task or step, its record, its scope) -> None
RunNode = Callable[[RunState, dict[str, Any], TaskRecord, dict[str, str]], None]
MAX_THREADS = 4096  # no template parallelism: every ready node at once, as Argo


def schedule(
    state: RunState,
    run_node: RunNode,
    limit: int,
    ready: Callable[[], list[Unit]],
    cut_short: Callable[[int], bool],
    finished: Callable[[TaskRecord], None],
) -> list[Unit]:
    """Run nodes as ``ready()`` hands them over (called again after each one finishes), at
    most ``limit`` at once (0: no limit); once ``cut_short(number running)`` holds none
    starts; ``finished(record)`` after each. Returns the nodes that never started."""
    queue: list[Unit] = []
    running: dict[Future, str] = {}
    with ThreadPoolExecutor(max_workers=limit or MAX_THREADS) as pool:
        try:
            changed = False
            while True:
                if not state.stopping.is_set() and not cut_short(len(running)):
                    queue.extend(ready())
                    started = len(running)
                    while queue and not (limit and len(running) >= limit):
                        key, task, scope = queue.pop(0)
                        if key not in state.kept:  # a kept node keeps its phase
                            state.node(key, task["template"]).state = TaskState.RUNNING
                        running[pool.submit(_run_unit, state, run_node, key, task, scope)] = key
                    changed = changed or len(running) > started
                if changed:  # once per batch: a save writes every node
                    state.changed()
                    changed = False
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    running.pop(future)
                    finished(future.result())
                changed = True
        except BaseException:
            # Ctrl-C: stop the processes first, or the pool would wait for them.
            state.stop()
            raise
    return queue


def _run_unit(
    state: RunState, run_node: RunNode, key: str, task: dict[str, Any], scope: dict[str, str]
) -> TaskRecord:
    record = state.node(key, task["template"])
    if key in state.kept:  # resumed: it succeeded before
        return record
    record.state = TaskState.RUNNING
    run_node(state, task, record, scope)
    return record


def expand(
    state: RunState, key: str, name: str, task: dict[str, Any], scope: dict[str, str]
) -> tuple[TaskRecord | None, list[Unit], list[TaskRecord] | None]:
    """A task's node and what to run for it: itself, or one node per item (its
    children, and no node of its own: a DAG adds its TaskGroup); a loop that cannot
    expand is an Error node, an empty one Skipped."""
    if not is_loop(task):
        return state.node(key, task["template"]), [(key, task, scope)], None
    try:
        items = loop_items(task, scope)
    except (LoopError, UnsupportedFeature) as exc:
        record = state.settle(key, task["template"], TaskState.ERROR, str(exc), "Skipped")
        return record, [], None
    if not items:
        record = state.settle(
            key, task["template"], TaskState.SKIPPED, "Skipped, empty params", "Skipped"
        )
        return record, [], None
    units: list[Unit] = []
    children = []
    parent = key[: -len(name)]
    for index, item in enumerate(items):
        child = parent + node_name(name, index, item)
        children.append(state.node(child, task["template"]))
        units.append((child, task, {**scope, **item_scope(item)}))
    return None, units, children
