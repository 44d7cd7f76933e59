"""The workflow's variables, ``{{workflow.*}}``, as Argo's controller sets them
(argo-workflows v4.0.5 workflow/controller/operator.go ``setGlobalParameters``,
``setExecWorkflow``; ``{{workflow.failures}}`` as ``getNodeFailures`` lists them): its
name, namespace, uid, creation time, service account, status and parameters (each, and
all as ``workflow.parameters.json``) at the start; its duration and failures at the end."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from flows.local.status import TaskRecord


def start_globals(manifest: dict[str, Any], name: str) -> dict[str, str]:
    """The variables a workflow starts with."""
    spec = manifest["spec"]
    found = {
        "workflow.name": name,
        "workflow.namespace": manifest["metadata"].get("namespace", "local"),
        "workflow.uid": str(uuid.uuid4()),
        "workflow.creationTimestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "workflow.serviceAccountName": spec.get("serviceAccountName", "default"),
        "workflow.status": "Running",
    }
    arguments = spec.get("arguments", {}).get("parameters", [])
    # all of them as one JSON string, before a parameter named "json" may replace it
    found["workflow.parameters.json"] = parameters_json(arguments)
    for parameter in arguments:
        found[f"workflow.parameters.{parameter['name']}"] = str(parameter.get("value", ""))
    return found


def failures_json(records: Iterable[TaskRecord]) -> str:
    """``{{workflow.failures}}`` as argo-workflows v4.0.5 sets it once the entrypoint ends
    (workflow/controller/operator.go): the Failed and Errored nodes as ``failedNodeStatus``
    (displayName, message, templateName, phase, podName, finishedAt), ``json.Marshal``-ed
    (``null`` when there are none), then ``strconv.Quote``-d "so that the escaped quotes
    are not removed during parameter substitution". A consumer therefore reads a JSON
    string that holds the JSON list, and must decode twice."""
    failed = [
        {"displayName": r.name, "message": r.message, "templateName": r.template,
         "phase": r.state.value, "podName": r.name, "finishedAt": _rfc3339(r.finished)}
        for r in records if r.state.failed
    ]  # fmt: skip
    return go_quote(go_json(failed or None))


def go_json(value: Any) -> str:
    """Go's ``json.Marshal`` of plain data: compact, UTF-8 kept, and ``<``, ``>``, ``&``
    escaped as it escapes them for HTML."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` of ``text``: double quotes around it, ``"`` and ``\\``
    escaped, printable Unicode kept (control characters take JSON's escapes here, where Go
    writes some as ``\\x..``; nothing Argo quotes this way holds them)."""
    return json.dumps(text, ensure_ascii=False)


PARAMETER_FIELDS = ("name", "default", "value", "valueFrom", "globalName", "enum", "description")


def parameters_json(parameters: list[dict[str, Any]]) -> str:
    """``{{workflow.parameters.json}}``: the workflow's arguments as Go's ``json.Marshal``
    writes Argo's ``[]Parameter`` (its field order, empty fields left out, values as
    strings), as argo-workflows v4.0.5 workflow/controller/operator.go sets it among the
    globals. Argo's examples/conditionals.yaml reads it with ``jsonpath``."""
    written = []
    for parameter in parameters:
        item: dict[str, Any] = {}
        for name in PARAMETER_FIELDS:
            value = parameter.get(name)
            if value is None or (name in ("globalName", "enum") and not value):
                continue  # omitempty: a nil pointer, an empty string or list
            if name in ("default", "value", "description"):
                value = _go_string(value)
            elif name == "enum":
                value = [_go_string(v) for v in value]
            item[name] = value
        written.append(item)
    text = json.dumps(written, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _go_string(value: Any) -> str:
    """A YAML scalar as Argo's AnyString holds it (``true``, not Python's ``True``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _rfc3339(epoch: float | None) -> str | None:
    """Argo's timestamps in {{workflow.failures}}: RFC 3339, UTC, seconds."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
