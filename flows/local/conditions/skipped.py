"""What a DAG task or a step sees of a Skipped or Omitted node before it: the outputs its
template declares a ``valueFrom.default`` for, else absent (docs/variables.md, "Outputs of
Skipped and Omitted Nodes"): an argument that only names an absent one is dropped, anything
else that names it is an Error."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flows.local.errors import ExpressionError
from flows.local.status import TaskRecord

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
