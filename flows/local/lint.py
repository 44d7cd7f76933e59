"""What ``argo lint`` and the runner's own limits refuse before anything starts: names that
point nowhere, inputs never given a value, templates this runner cannot run as a DAG task,
containers whose program is only known to their image, parameter sources not on this
machine. One line per problem; the runner joins them into its refusal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RETRY_POLICIES = {"Always", "OnFailure", "OnError", "OnTransientError"}


def lint(manifest: Mapping[str, Any]) -> list[str]:
    spec = manifest.get("spec", {})
    templates = {t.get("name"): t for t in spec.get("templates", [])}
    problems: list[str] = []
    entry = spec.get("entrypoint")
    if entry not in templates:
        problems.append(f"spec.entrypoint {entry!r} names no template")
    if spec.get("onExit") and spec["onExit"] not in templates:
        problems.append(f"spec.onExit {spec['onExit']!r} names no template")
    for parameter in spec.get("arguments", {}).get("parameters", []):
        if "valueFrom" in parameter:
            problems.append(
                f"spec.arguments parameter {parameter.get('name')}: valueFrom "
                f"{sorted(parameter['valueFrom'])} (not on this machine)"
            )
    for name, template in templates.items():
        problems += _template(name, template, templates)
    return problems


def _template(name: str, template: Mapping[str, Any], templates: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    container = template.get("container")
    if container is not None and not container.get("command"):
        problems.append(
            f"template {name} has no command: the image's entrypoint is not known on this machine"
        )
    for parameter in template.get("inputs", {}).get("parameters", []):
        if "valueFrom" in parameter:
            problems.append(
                f"template {name} input {parameter.get('name')}: valueFrom "
                f"{sorted(parameter['valueFrom'])} (not on this machine)"
            )
    policy = template.get("retryStrategy", {}).get("retryPolicy")
    if policy is not None and policy not in RETRY_POLICIES:
        problems.append(f"template {name}.retryStrategy: retryPolicy {policy!r}")
    for task in template.get("dag", {}).get("tasks", []):
        problems += _task(name, task, templates)
    return problems


def _task(dag: str, task: Mapping[str, Any], templates: Mapping[str, Any]) -> list[str]:
    where = f"template {dag} task {task.get('name')}"
    target = templates.get(task.get("template"))
    if target is None:
        return [f"{where}: template {task.get('template')!r} names no template"]
    if "container" not in target and "resource" not in target:
        kind = next((k for k in ("dag", "steps", "script", "suspend") if k in target), "other")
        return [f"{where}: a {kind} template as a DAG task (nested templates)"]
    given = {p.get("name") for p in task.get("arguments", {}).get("parameters", [])}
    problems = []
    for parameter in target.get("inputs", {}).get("parameters", []):
        has_value = "value" in parameter or "default" in parameter or "valueFrom" in parameter
        if parameter.get("name") not in given and not has_value:
            problems.append(f"{where}: input parameter {parameter.get('name')} is never given")
    return problems
