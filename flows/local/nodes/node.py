"""The node tree of a local run, as Argo's controller walks it (argo-workflows v4.0.5
workflow/controller/operator.go ``executeTemplate``, dag.go ``executeDAG``, steps.go
``executeSteps``), each call by name:

- ``run_node`` (``executeTemplate``): one node; its ``when`` decides whether it runs at
  all, its inputs are bound from the task's arguments (or their defaults), then a DAG or
  steps template runs its own nodes and gives back its outputs, and any other template
  runs as a pod (``flows.local.pods.pod``): a memo hit reused, or its process run with
  retries. An expression that fails makes the node an Error, as in Argo; a refusal a
  Failure.
- ``run_dag`` and ``run_steps`` (``executeDAG``, ``executeSteps``): a ``DagContext``
  (``flows.local.nodes.dag``) or each ``StepGroup`` (``flows.local.nodes.step_groups``)
  says what is ready; ``run_nodes``, the one scheduling loop, starts those nodes on
  threads, each through ``run_node``.
"""

from __future__ import annotations

import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from flows.local.conditions.when import when_says_run
from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.nodes.dag import DagContext
from flows.local.nodes.loops import Unit
from flows.local.nodes.scope import bind_inputs, composite_outputs, export_globals, scope_of
from flows.local.nodes.step_groups import StepGroup
from flows.local.pods.pod import Pods
from flows.local.pods.retry import retry_placeholders
from flows.local.state import RunState
from flows.local.status import FAIL_FAST_MESSAGE, TaskRecord, TaskState, file_name
from flows.local.substitution import substitute, substitute_all

MAX_THREADS = 4096  # no template parallelism: every ready node at once, as Argo


def run_node(
    state: RunState,
    pods: Pods,
    task: dict[str, Any],
    record: TaskRecord,
    scope: dict[str, str] | None = None,
) -> None:
    """Run ``task`` (a DAG task, a step or the entrypoint) as the node ``record``;
    ``scope``: what its arguments may refer to (default: ``scope_of(state)``)."""
    record.started = time.time()
    try:
        scope = scope_of(state) if scope is None else scope
        run, when = when_says_run(task, scope)
        if not run:  # Argo's Skipped node: no inputs bound, nothing run
            record.state, record.kind = TaskState.SKIPPED, "Skipped"
            record.message = f"when '{when}' evaluated false"
            return
        template = state.templates[task["template"]]
        inputs = bind_inputs(task, template, scope)
        record.inputs = {k.removeprefix("inputs.parameters."): v for k, v in inputs.items()}
        if "dag" in template or "steps" in template:
            _run_composite(state, pods, record, template, inputs)
            export_globals(state, template, record)
            return
        scope = {**scope_of(state, inputs), **retry_placeholders(template)}
        resolved = substitute_all({k: v for k, v in template.items() if k != "outputs"}, scope)
        resolved["outputs"] = output_defaults(template.get("outputs", {}), scope)
        hit = state.memo.get(resolved, state.cwd, record.name)
        if hit and not hit.gone:
            record.outputs = hit.outputs
            record.state, record.message = TaskState.CACHED, cached_note(hit.workflow, state.name)
        else:
            note = f"ran again: the memo from {hit.workflow or 'a run'}: {hit.gone}" if hit else ""
            record.message = note  # a hit whose local files are gone runs again, and says so
            pods.run(record, resolved)
            if record.state is TaskState.SUCCEEDED:  # Argo caches successes only
                state.memo.put(resolved, record.outputs, state.cwd, state.name)
                record.message = record.message or note
        export_globals(state, template, record)
    except ExpressionError as exc:  # Argo: the node is an Error, not retried
        record.state, record.message = TaskState.ERROR, str(exc)
    except (UnsupportedFeature, FileNotFoundError, OSError) as exc:
        record.state, record.message = TaskState.FAILED, str(exc)
    except Exception as exc:  # the runner's own fault: an Error node, as Argo's controller
        # marks one it cannot run; the exit handler still runs and the rest is kept
        record.state = TaskState.ERROR
        record.message = f"the local runner failed on this node: {type(exc).__name__}: {exc}"
        log = state.run_dir / "logs" / f"{file_name(record.name)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as handle:
            handle.write(traceback.format_exc())
    finally:
        record.finished = time.time()


def output_defaults(outputs: dict[str, Any], scope: dict[str, str]) -> dict[str, Any]:
    """A pod's declared outputs with their ``valueFrom.default`` filled in: Argo substitutes
    the whole template before the pod starts (v4.0.5 workflow/common/util.go
    ``SubstituteParams``), so a default may be ``{{workflow.name}}`` or an input."""
    parameters = []
    for parameter in outputs.get("parameters", []):
        source = parameter.get("valueFrom") or {}
        if isinstance(source.get("default"), str) and "{{" in source["default"]:
            source = {**source, "default": substitute(source["default"], scope)}
            parameter = {**parameter, "valueFrom": source}
        parameters.append(parameter)
    return {**outputs, "parameters": parameters} if parameters else outputs


def cached_note(workflow: str, this_run: str) -> str:
    """The task table's note of a memo hit: the run it came from."""
    if not workflow or workflow == this_run:
        return "memoized: reused"
    return f"memoized: reused from {workflow}"


def _run_composite(
    state: RunState, pods: Pods, record: TaskRecord, template: dict[str, Any], inputs: dict
) -> None:
    """A DAG or steps template's nodes; its outputs and phase go to ``record``."""
    record.kind = "DAG" if "dag" in template else "Steps"
    if "dag" in template:
        refs = run_dag(state, pods, record, template, inputs)
    else:
        refs = run_steps(state, pods, record, template, inputs)
    if refs is None:
        return  # failed; the phase and message are set
    try:
        record.outputs = composite_outputs(template, {**state.globals, **inputs, **refs})
    except (UnsupportedFeature, ExpressionError) as exc:
        record.state, record.message = TaskState.ERROR, str(exc)
        return
    record.state, record.message = TaskState.SUCCEEDED, ""


def run_dag(
    state: RunState, pods: Pods, record: TaskRecord, template: dict[str, Any], inputs: dict
) -> dict[str, str] | None:
    """A DAG template's tasks as the node ``record``: what ``{{tasks.*}}`` gives of them
    when it succeeded, else None (``record``'s phase and message set)."""
    dag = DagContext(state, record, template, inputs)
    return dag.end(run_nodes(state, pods, dag))


def run_steps(
    state: RunState, pods: Pods, record: TaskRecord, template: dict[str, Any], inputs: dict
) -> dict[str, str] | None:
    """A steps template's groups in order as the node ``record``: what ``{{steps.*}}``
    gives of its steps when it succeeded, else None (``record``'s phase and message set)."""
    refs: dict[str, str] = {}
    for index in range(len(template["steps"])):
        if state.stopping.is_set():
            record.state, record.message = TaskState.FAILED, state.stopped_message()
            return None
        group = StepGroup(state, record, template, index, {**state.globals, **inputs, **refs})
        if group.end(run_nodes(state, pods, group)):
            record.state, record.message = TaskState.FAILED, FAIL_FAST_MESSAGE
            return None
        bad = group.failure()
        if bad is not None:
            record.state, record.message = TaskState.FAILED, f"child '{bad.name}' failed"
            return None
        refs.update(group.refs())
    return refs


class Runnable(Protocol):
    """What the scheduling loop runs: a ``DagContext`` or a ``StepGroup``."""

    limit: int  # nodes at once (the template's parallelism); 0: no limit

    def ready(self) -> list[Unit]: ...  # the nodes that may start now
    def cut_short(self) -> bool: ...  # start nothing more (the template's failFast)
    def finished(self, record: TaskRecord) -> None: ...  # a node ended


def run_nodes(state: RunState, pods: Pods, work: Runnable) -> list[Unit]:
    """The one scheduling loop: ``work``'s ready nodes started on threads (at most its
    ``limit`` at once), each through ``run_node``; ``ready`` asked again after each one
    finishes, until none runs and none is ready; nothing more starts once ``work`` is cut
    short or the run stops (a signal, the workflow's deadline). Returns the nodes that
    were ready and never started."""
    queue: list[Unit] = []
    running: dict[Future, str] = {}
    with ThreadPoolExecutor(max_workers=work.limit or MAX_THREADS) as pool:
        try:
            changed = False
            while True:
                if not state.stopping.is_set() and not work.cut_short():
                    queue.extend(work.ready())
                    started = len(running)
                    while queue and not (work.limit and len(running) >= work.limit):
                        key, task, scope = queue.pop(0)
                        if key not in state.kept:  # a kept node keeps its phase
                            state.node(key, task["template"]).state = TaskState.RUNNING
                        running[pool.submit(_run_unit, state, pods, key, task, scope)] = key
                    changed = changed or len(running) > started
                if changed:  # once per batch: a save writes every node
                    state.on_change()
                    changed = False
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    running.pop(future)
                    work.finished(future.result())
                changed = True
        except BaseException:
            # Ctrl-C: stop the processes first, or the pool would wait for them.
            pods.stop()
            raise
    return queue


def _run_unit(
    state: RunState, pods: Pods, key: str, task: dict[str, Any], scope: dict[str, str]
) -> TaskRecord:
    record = state.node(key, task["template"])
    if key in state.kept:  # resumed: it succeeded before
        return record
    record.state = TaskState.RUNNING
    run_node(state, pods, task, record, scope)
    return record
