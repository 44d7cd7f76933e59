"""A Workflow as Argo's controller sees it before it runs: ``spec.workflowTemplateRef``
joined with the WorkflowTemplate it names, then the ``-p name=value`` parameters applied.

Argo's join (``JoinWorkflowSpec``): the template's spec is the base, the workflow's own
fields win, ``templates`` and ``arguments.parameters`` merged by name. ``argo submit -p``
puts the given parameters first and keeps the others; like Argo, a name the workflow does
not declare is added, not refused (``{{workflow.parameters.x}}`` then finds it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from flows.local.errors import UnsupportedFeature


def resolve(
    manifest: Mapping[str, Any],
    workflow_templates: Iterable[Mapping[str, Any]] = (),
    parameters: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    resolved = copy.deepcopy(dict(manifest))
    spec = resolved.setdefault("spec", {})
    ref = spec.pop("workflowTemplateRef", None)
    if ref is not None:
        if ref.get("clusterScope"):
            raise UnsupportedFeature(
                "spec.workflowTemplateRef.clusterScope (ClusterWorkflowTemplate)"
            )
        known = {t.get("metadata", {}).get("name"): t for t in workflow_templates}
        template = known.get(ref.get("name"))
        if template is None or template.get("kind") != "WorkflowTemplate":
            raise UnsupportedFeature(
                f"spec.workflowTemplateRef {ref.get('name')!r}: no such WorkflowTemplate given "
                f"(given: {sorted(n for n in known if n)})"
            )
        resolved["spec"] = spec = _join(copy.deepcopy(template["spec"]), spec)
    if parameters:
        given = [{"name": k, "value": str(v)} for k, v in parameters.items()]
        kept = [
            p
            for p in spec.get("arguments", {}).get("parameters", [])
            if p["name"] not in parameters
        ]
        spec.setdefault("arguments", {})["parameters"] = given + kept
    return resolved


def _join(base: dict[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in own.items():
        if key == "templates":
            base[key] = _by_name(base.get(key, []), value)
        elif key == "arguments":
            arguments = base.setdefault("arguments", {})
            for kind, items in value.items():
                arguments[kind] = _by_name(arguments.get(kind, []), items)
        else:
            base[key] = value
    return base


def _by_name(base: list[dict], own: list[dict]) -> list[dict]:
    merged = {item["name"]: item for item in base}
    for item in own:
        merged[item["name"]] = {**merged.get(item["name"], {}), **item}
    return list(merged.values())
