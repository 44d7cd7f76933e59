"""One node of a local run, as Argo's controller runs a template (``executeTemplate``): its
``when`` decides whether it runs at all, its inputs are bound from the task's arguments (or
their defaults), then a DAG or steps template runs its own nodes (``flows.local.nodes.dag``,
``flows.local.nodes.step_groups``) and gives back its outputs, and any other template runs
as a pod (``flows.local.pods.pod``): a memo hit reused, or its process run with retries.
An expression that fails makes the node an Error, as in Argo; a refusal a Failure.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from flows.local.conditions.skipped import absent_output, check_absent
from flows.local.conditions.when import when_says_run
from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.nodes.dag import run_dag
from flows.local.nodes.references import composite_outputs
from flows.local.nodes.step_groups import run_steps
from flows.local.pods.pod import run_pod
from flows.local.pods.retry import retry_placeholders
from flows.local.records import TaskRecord, TaskState, file_name
from flows.local.state import RunState
from flows.local.substitution import substitute, substitute_all


def scope_of(state: RunState, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The workflow's globals and the entry DAG's task outputs (what the exit handler and a
    pod's own template may refer to), and ``extra``."""
    scope = dict(state.globals)
    for name, record in list(state.records.items()):
        for key, value in record.outputs.items():
            scope[f"tasks.{name}.outputs.parameters.{key}"] = value
    return {**scope, **(extra or {})}


def bind_inputs(
    task: dict[str, Any], template: dict[str, Any], scope: dict[str, str]
) -> dict[str, str]:
    """A template's input parameters from the task's arguments, else their own value or
    default, as ``{{inputs.parameters.NAME}}``."""
    arguments = task.get("arguments", {}).get("parameters", [])
    given = {}
    for p in arguments:
        value = str(p.get("value", ""))
        if absent_output(value, scope):
            continue  # Argo drops it: the input's default applies, or it is an Error
        check_absent(value, scope)
        given[p["name"]] = substitute(value, scope)
    bound = {}
    for parameter in template.get("inputs", {}).get("parameters", []):
        name = parameter["name"]
        if name in given:
            bound[name] = given[name]
        elif "value" in parameter or "default" in parameter:
            bound[name] = substitute(str(parameter.get("value", parameter.get("default"))), scope)
        else:
            for p in arguments:
                if p["name"] == name:
                    check_absent(str(p.get("value", "")), scope)
            raise UnsupportedFeature(f"task {task['name']}: input parameter {name} has no value")
    return {f"inputs.parameters.{k}": v for k, v in bound.items()}


def run_node(
    state: RunState, task: dict[str, Any], record: TaskRecord, scope: dict[str, str] | None = None
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
        if "dag" in template or "steps" in template:
            run_composite(state, record, template, inputs)
            export_globals(state, template, record)
            return
        scope = {**scope_of(state, inputs), **retry_placeholders(template)}
        resolved = substitute_all({k: v for k, v in template.items() if k != "outputs"}, scope)
        resolved["outputs"] = template.get("outputs", {})
        hit = state.memo.get(resolved, state.cwd)
        if hit:
            record.outputs = hit[0]
            record.state, record.message = TaskState.CACHED, f"memoized: reused {hit[1].name}"
        else:
            run_pod(state, record.name, resolved, record)
            if record.state is TaskState.SUCCEEDED:  # Argo caches successes only
                state.memo.put(resolved, record.outputs, state.cwd)
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


def run_composite(
    state: RunState, record: TaskRecord, template: dict[str, Any], inputs: dict[str, str]
) -> None:
    """Run a DAG or steps template's nodes; its outputs and phase go to ``record``."""
    record.kind = "DAG" if "dag" in template else "Steps"
    run = run_dag if "dag" in template else run_steps
    refs = run(state, record, template, inputs, run_node)
    if refs is None:
        return  # failed; the phase and message are set
    try:
        record.outputs = composite_outputs(template, {**state.globals, **inputs, **refs})
    except (UnsupportedFeature, ExpressionError) as exc:
        record.state, record.message = TaskState.ERROR, str(exc)
        return
    record.state, record.message = TaskState.SUCCEEDED, ""


def export_globals(state: RunState, template: dict[str, Any], record: TaskRecord) -> None:
    """Output parameters with a ``globalName``: ``{{workflow.outputs.parameters.NAME}}``."""
    for parameter in template.get("outputs", {}).get("parameters", []):
        if parameter.get("globalName") and parameter["name"] in record.outputs:
            state.globals[f"workflow.outputs.parameters.{parameter['globalName']}"] = (
                record.outputs[parameter["name"]]
            )
