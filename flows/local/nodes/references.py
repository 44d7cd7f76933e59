"""What a DAG's tasks and a steps template's steps see of the nodes before them, and what the
template gives back: ``{{tasks.NAME.*}}`` / ``{{steps.NAME.*}}`` of one node, ``continueOn``
(a failure that does not stop the parent), and a DAG or steps template's own outputs taken
from its children through ``valueFrom.parameter`` or ``valueFrom.expression``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.local.conditions.skipped import skipped_outputs
from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.records import TaskRecord, TaskState
from flows.local.substitution import evaluate_tag, substitute

FAIL_FAST_MESSAGE = "template has failed or errored children and failFast enabled"


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
