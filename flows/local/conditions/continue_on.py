"""``continueOn``: a task's or step's failure that does not stop its parent, as Argo's
``ContinuesOn`` reads it (pkg/apis/workflow/v1alpha1/workflow_types.go): ``failed`` for a
Failed node, ``error`` for an Error. A DAG's phase skips such a leaf, a steps group goes on
past such a step, and a plain ``depends`` on such a task also accepts that phase."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.local.status import TaskState


def continues(task: Mapping[str, Any], state: TaskState) -> bool:
    """Whether the failure of this task or step (``state``) does not stop its parent."""
    flags = task.get("continueOn") or {}
    return (state is TaskState.FAILED and bool(flags.get("failed"))) or (
        state is TaskState.ERROR and bool(flags.get("error"))
    )
