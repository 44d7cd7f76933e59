"""What a DAG task or a step sees of the nodes before it, and whether it runs at all: the
outputs of a Skipped or Omitted node (their ``valueFrom.default``, else absent:
docs/variables.md, "Outputs of Skipped and Omitted Nodes"), its ``when``, and a DAG task's
``depends`` over the finished tasks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flows.local.checks import UnsupportedFeature, substitute
from flows.local.conditions import depends_logic, depends_true, task_results
from flows.local.expr_syntax import ExpressionError
from flows.local.records import TaskRecord
from flows.local.when import when_true

PURE_REFERENCE = re.compile(
    r"\{\{\s*((?:tasks|steps)\.[\w-]+)\.outputs\.parameters\.([\w-]+)\s*\}\}"
)
NOT_RUN = ("Skipped", "Omitted")


def skipped_outputs(base: str, record: TaskRecord, template: Mapping[str, Any]) -> dict[str, str]:
    """A Skipped or Omitted node's outputs: the ``valueFrom.default`` its template declares."""
    if record.state.value not in NOT_RUN:
        return {}
    defaults = {}
    for parameter in template.get("outputs", {}).get("parameters", []):
        source = parameter.get("valueFrom") or {}
        if "default" in source:
            defaults[f"{base}.outputs.parameters.{parameter['name']}"] = str(source["default"])
    return defaults


def absent_output(value: str, scope: Mapping[str, str]) -> bool:
    """Whether an argument is only a reference to an output a skipped or omitted node never
    wrote: Argo then drops the argument, so the input's own default applies."""
    match = PURE_REFERENCE.fullmatch(value.strip())
    if not match or f"{match.group(1)}.outputs.parameters.{match.group(2)}" in scope:
        return False
    return scope.get(f"{match.group(1)}.status") in NOT_RUN


def check_absent(value: str, scope: Mapping[str, str]) -> None:
    """A reference to an absent output that no input default covers: Argo's terminal Error."""
    for node, parameter in PURE_REFERENCE.findall(value):
        key = f"{node}.outputs.parameters.{parameter}"
        phase = scope.get(f"{node}.status")
        if key not in scope and phase in NOT_RUN:
            kind, name = node.split(".", 1)
            raise ExpressionError(
                f"{{{{{key}}}}} is an absent optional: {kind[:-1]} {name} was "
                f"{phase} and its output declares no valueFrom.default"
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
    task: Mapping[str, Any],
    by_name: Mapping[str, Mapping[str, Any]],
    nodes: Mapping[str, TaskRecord],
    loops: Mapping[str, list[TaskRecord]],
) -> bool:
    """Whether the finished dependencies (a loop's with its items' phases, for
    ``.AnySucceeded`` and ``.AllFailed``) satisfy the task's ``depends``."""
    logic = depends_logic(task, by_name)
    if not logic:
        return True
    results = {
        name: task_results(node.state.phase, [c.state.phase for c in loops.get(name, [])])
        for name, node in nodes.items()
    }
    return depends_true(logic, results)
