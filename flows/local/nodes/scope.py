"""What a node sees and what it gives back, as Argo's controller builds a template's scope
(workflow/controller/scope.go, dag.go ``buildLocalScopeFromTask``, steps.go
``resolveReferences``): the workflow's globals and the entry DAG's task outputs
(``scope_of``), a task's arguments bound to its template's inputs (``bind_inputs``), what
``{{tasks.NAME.*}}`` / ``{{steps.NAME.*}}`` give of one node (``node_refs``), and what a
DAG or steps template gives back: its outputs from its children through
``valueFrom.parameter`` or ``valueFrom.expression`` (``composite_outputs``) and the
``globalName`` outputs a template exports (``export_globals``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.local.conditions.skipped import absent_output, check_absent, skipped_outputs
from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.state import RunState
from flows.local.status import TaskRecord
from flows.local.substitution import evaluate_tag, substitute


def scope_of(state: RunState, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The workflow's globals and the entry DAG's task outputs (what the exit handler and a
    pod's own template may refer to), and ``extra``."""
    scope = dict(state.globals)
    for name, record in list(state.tasks.items()):
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


def export_globals(state: RunState, template: dict[str, Any], record: TaskRecord) -> None:
    """Output parameters with a ``globalName``: ``{{workflow.outputs.parameters.NAME}}``."""
    for parameter in template.get("outputs", {}).get("parameters", []):
        if parameter.get("globalName") and parameter["name"] in record.outputs:
            state.globals[f"workflow.outputs.parameters.{parameter['globalName']}"] = (
                record.outputs[parameter["name"]]
            )
