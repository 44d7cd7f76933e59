"""What a DAG task sees of the tasks before it, and whether it runs at all: the variables
``tasks.<name>.status`` and ``tasks.<name>.outputs.parameters.<p>`` (a Skipped or Omitted
task's outputs are their ``valueFrom.default``, else absent: docs/variables.md, "Outputs of
Skipped and Omitted Nodes"), its ``when``, and its ``depends`` over the finished tasks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flows.local.checks import UnsupportedFeature, substitute
from flows.local.conditions import depends_logic, depends_true, task_results
from flows.local.expr_syntax import ExpressionError
from flows.local.records import TaskRecord, TaskState
from flows.local.when import when_true

PURE_REFERENCE = re.compile(r"\{\{\s*tasks\.([\w-]+)\.outputs\.parameters\.([\w-]+)\s*\}\}")


def entry_inputs(
    entry: Mapping[str, Any], spec: Mapping[str, Any], globals_: Mapping[str, str]
) -> dict[str, str]:
    """The entrypoint's ``inputs.parameters``: Argo gives it the workflow's arguments by
    name, and a value passed wins over the input's own ``value`` (docs/fields.md)."""
    given = {p["name"]: p.get("value") for p in spec.get("arguments", {}).get("parameters", [])}
    bound = {}
    for parameter in entry.get("inputs", {}).get("parameters", []):
        name = parameter["name"]
        value = given.get(name, parameter.get("value", parameter.get("default")))
        if value is None:
            continue
        try:
            bound[f"inputs.parameters.{name}"] = substitute(str(value), globals_)
        except (UnsupportedFeature, ExpressionError) as exc:
            raise UnsupportedFeature(f"entrypoint input {name}: {exc}") from None
    return bound


def task_variables(name: str, record: TaskRecord, template: Mapping[str, Any]) -> dict[str, str]:
    """The ``tasks.<name>.*`` variables of one task for those after it."""
    variables = {f"tasks.{name}.outputs.parameters.{k}": v for k, v in record.outputs.items()}
    if record.state.fulfilled:
        variables[f"tasks.{name}.status"] = record.state.phase
    if record.state in (TaskState.SKIPPED, TaskState.OMITTED):
        for parameter in template.get("outputs", {}).get("parameters", []):
            source = parameter.get("valueFrom", {})
            if "default" in source:
                key = f"tasks.{name}.outputs.parameters.{parameter['name']}"
                variables[key] = str(source["default"])
    return variables


def absent_output(value: str, scope: Mapping[str, str], tasks: Mapping[str, TaskRecord]) -> bool:
    """Whether an argument is only a reference to an output a skipped or omitted task never
    wrote: Argo then drops the argument, so the input's own default applies."""
    match = PURE_REFERENCE.fullmatch(value.strip())
    if not match or f"tasks.{match.group(1)}.outputs.parameters.{match.group(2)}" in scope:
        return False
    record = tasks.get(match.group(1))
    return record is not None and record.state in (TaskState.SKIPPED, TaskState.OMITTED)


def check_absent(value: str, scope: Mapping[str, str], tasks: Mapping[str, TaskRecord]) -> None:
    """A reference to an absent output that no input default covers: Argo's terminal Error."""
    for task, parameter in PURE_REFERENCE.findall(value):
        record = tasks.get(task)
        key = f"tasks.{task}.outputs.parameters.{parameter}"
        if key not in scope and record and record.state in (TaskState.SKIPPED, TaskState.OMITTED):
            raise ExpressionError(
                f"{{{{{key}}}}} is an absent optional: task {task} was "
                f"{record.state.value} and its output declares no valueFrom.default"
            )


def when_says_run(task: Mapping[str, Any], scope: Mapping[str, str]) -> tuple[bool, str]:
    """(run?, the substituted ``when``); ``ExpressionError`` when it cannot be evaluated."""
    when = task.get("when")
    if when in (None, ""):
        return True, ""
    try:
        text = substitute(str(when), scope)
    except UnsupportedFeature as exc:  # a name with no value: Argo's Error, not a Failure
        raise ExpressionError(f"when {when!r}: {exc}") from None
    return when_true(text), text


def depends_says_run(
    task: Mapping[str, Any], by_name: Mapping[str, Mapping[str, Any]], tasks: Mapping[str, Any]
) -> bool:
    """Whether the finished dependencies satisfy the task's ``depends``."""
    logic = depends_logic(task, by_name)
    if not logic:
        return True
    results = {name: task_results(record.state.phase) for name, record in tasks.items()}
    return depends_true(logic, results)
