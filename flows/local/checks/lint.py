"""What ``argo lint`` and the runner's own limits refuse before anything starts: names that
point nowhere, inputs never given a value (the entrypoint's by the workflow's arguments),
dependencies on tasks a DAG does not have, a backoff without its duration, containers
whose program is only known to their image, parameter sources not on this machine. One
line per problem; the runner joins them into its refusal."""

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
    entry_template = templates.get(entry)
    if entry_template is not None:  # the workflow's arguments are the entrypoint's inputs
        given = {p.get("name") for p in spec.get("arguments", {}).get("parameters", [])}
        problems += _inputs_given(f"spec.entrypoint {entry}", entry_template, given)
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
    backoff = template.get("retryStrategy", {}).get("backoff")
    if backoff is not None and not backoff.get("duration"):
        problems.append(f"template {name}.retryStrategy.backoff: no duration (Argo needs one)")
    tasks = template.get("dag", {}).get("tasks", [])
    names = {t.get("name") for t in tasks}
    for task in tasks:
        problems += _task(f"template {name} task {task.get('name')}", task, templates)
        for dependency in task.get("dependencies", []):
            if dependency not in names:
                problems.append(
                    f"template {name} task {task.get('name')}: depends on {dependency!r}, "
                    "no task of this DAG"
                )
    for group in template.get("steps") or []:
        for step in group if isinstance(group, list) else []:
            problems += _task(f"template {name} step {step.get('name')}", step, templates)
    return problems


def _task(where: str, task: Mapping[str, Any], templates: Mapping[str, Any]) -> list[str]:
    target = templates.get(task.get("template"))
    if target is None:
        return [f"{where}: template {task.get('template')!r} names no template"]
    given = {p.get("name") for p in task.get("arguments", {}).get("parameters", [])}
    return _inputs_given(where, target, given)


def _inputs_given(where: str, target: Mapping[str, Any], given: set[Any]) -> list[str]:
    problems = []
    for parameter in target.get("inputs", {}).get("parameters", []):
        has_value = "value" in parameter or "default" in parameter or "valueFrom" in parameter
        if parameter.get("name") not in given and not has_value:
            problems.append(f"{where}: input parameter {parameter.get('name')} is never given")
    return problems
