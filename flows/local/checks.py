"""What the local runner understands of an Argo Workflow, and Argo's ``{{...}}`` expressions.

The runner is for one machine, not an engine: before it starts anything it walks the
manifest and refuses, by name, every field and expression it does not implement. Fields
that only matter to a cluster scheduler (images, resources, security contexts, node
selection) are accepted and have no effect here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from flows.local.conditions import depends_problems
from flows.local.expressions import ExpressionError, environment, evaluate, render
from flows.local.expressions import problems as expression_problems

# A simple tag {{name}}, or an expression tag {{=expr}} that, as in Argo's templates, ends
# at the first "}}" (it may hold braces and span lines).
EXPRESSION = re.compile(r"\{\{\s*(=[\s\S]*?|[^{}]*?)\s*\}\}")
SUPPORTED_EXPRESSIONS = (
    re.compile(r"inputs\.parameters\.[\w-]+"),
    re.compile(r"tasks\.[\w-]+\.outputs\.parameters\.[\w-]+"),
    re.compile(r"tasks\.[\w-]+\.status"),
    re.compile(
        r"workflow\.(name|namespace|uid|status|creationTimestamp|serviceAccountName|duration|failures)"
    ),
    re.compile(r"workflow\.(parameters|outputs\.parameters)\.[\w-]+"),
)

# Per part of the manifest: fields implemented, and fields accepted with no local effect.
SPEC_FIELDS = {
    "entrypoint", "templates", "arguments", "onExit", "parallelism", "activeDeadlineSeconds",
}  # fmt: skip
SPEC_IGNORED = {
    "serviceAccountName", "ttlStrategy", "podGC", "securityContext", "podMetadata",
    "workflowMetadata", "imagePullSecrets", "nodeSelector", "tolerations", "affinity",
    "priorityClassName", "podPriorityClassName", "archiveLogs",
    "artifactRepositoryRef", "hostNetwork", "dnsPolicy",
    "automountServiceAccountToken", "executor", "podDisruptionBudget", "schedulerName",
}  # fmt: skip
TEMPLATE_FIELDS = {
    "name", "container", "dag", "resource", "inputs", "outputs", "retryStrategy",
    "activeDeadlineSeconds", "memoize", "parallelism",
}  # fmt: skip
TEMPLATE_IGNORED = {
    "metadata", "securityContext", "serviceAccountName", "nodeSelector", "tolerations",
    "affinity", "archiveLocation", "priorityClassName",
    "automountServiceAccountToken", "podSpecPatch", "schedulerName", "priority",
}  # fmt: skip
CONTAINER_FIELDS = {"name", "image", "imagePullPolicy", "command", "args", "env", "envFrom"}
CONTAINER_IGNORED = {"resources", "securityContext", "ports", "terminationMessagePath"}
TASK_FIELDS = {"name", "template", "arguments", "dependencies", "depends", "when"}
RESOURCE_FIELDS = {
    "action", "manifest", "manifestFrom", "successCondition", "failureCondition",
    "setOwnerReference",
}  # fmt: skip
RETRY_FIELDS = {"limit", "backoff", "retryPolicy", "affinity"}
PARAMETER_FIELDS = {"name", "value", "default", "valueFrom", "globalName", "description", "enum"}
OUTPUT_ARTIFACT_FIELDS = {"name", "path", "archive", "globalName", "optional"}


class UnsupportedFeature(ValueError):
    """The workflow uses something the local runner does not implement."""


def expressions(node: Any) -> Iterator[str]:
    """Every ``{{...}}`` expression in a nested structure of dicts, lists and strings."""
    if isinstance(node, str):
        yield from EXPRESSION.findall(node)
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from expressions(value)
    elif isinstance(node, list):
        for value in node:
            yield from expressions(value)


def substitute(text: str, scope: Mapping[str, str]) -> str:
    """Replace each ``{{name}}`` with ``scope[name]``, as Argo does for parameters."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("="):
            return evaluate_tag(name[1:], scope)
        if name not in scope:
            raise UnsupportedFeature(f"expression {{{{{name}}}}} has no value here")
        return scope[name]

    return EXPRESSION.sub(replace, text)


def evaluate_tag(text: str, scope: Mapping[str, str]) -> str:
    """An expression tag's text in place, as Argo writes it; a failure names the tag."""
    try:
        return render(evaluate(text, environment(scope)))
    except ExpressionError as exc:
        raise ExpressionError(f"expression {{{{={text}}}}}: {exc}") from None
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError) as exc:
        raise ExpressionError(f"expression {{{{={text}}}}}: {exc}") from None


def substitute_all(node: Any, scope: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return substitute(node, scope)
    if isinstance(node, Mapping):
        return {key: substitute_all(value, scope) for key, value in node.items()}
    if isinstance(node, list):
        return [substitute_all(value, scope) for value in node]
    return node


def _extra(where: str, found: Mapping[str, Any], *allowed: set[str]) -> list[str]:
    known = set().union(*allowed)
    return [f"{where}: {key}" for key in found if key not in known]


def unsupported(manifest: Mapping[str, Any]) -> list[str]:
    """Everything in the manifest the local runner would not honour, one line each."""
    problems: list[str] = []
    if manifest.get("kind") != "Workflow":
        problems.append(f"kind {manifest.get('kind')!r} (only Workflow runs locally)")
    spec = manifest.get("spec", {})
    problems += _extra("spec", spec, SPEC_FIELDS, SPEC_IGNORED)
    for template in spec.get("templates", []):
        where = f"template {template.get('name')}"
        problems += _extra(where, template, TEMPLATE_FIELDS, TEMPLATE_IGNORED)
        problems += _check_template(where, template)
    for expression in sorted(set(expressions(spec))):
        if expression.startswith("="):
            continue  # checked per template below, by what it calls
        if not any(p.fullmatch(expression) for p in SUPPORTED_EXPRESSIONS):
            problems.append(f"expression {{{{{expression}}}}}")
    for template in spec.get("templates", []):
        for expression in dict.fromkeys(expressions(template)):
            if expression.startswith("="):
                problems += [
                    f"template {template.get('name')} expression {{{{{expression}}}}}: {why}"
                    for why in expression_problems(expression[1:])
                ]
    return problems


def _check_template(where: str, template: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    inputs = template.get("inputs", {})
    kinds = [k for k in ("container", "dag", "resource") if k in template]
    if len(kinds) != 1:
        return problems  # the unknown kind (steps, script, suspend...) is reported already
    if "container" in template:
        container = template["container"]
        problems += _extra(f"{where}.container", container, CONTAINER_FIELDS, CONTAINER_IGNORED)
        for env in container.get("env", []):
            source = env.get("valueFrom", {})
            if source and set(source) != {"secretKeyRef"}:
                problems.append(f"{where}.container.env {env['name']}: valueFrom {sorted(source)}")
        for source in container.get("envFrom", []):
            if set(source) - {"secretRef", "prefix"}:
                problems.append(f"{where}.container.envFrom: {sorted(source)}")
    if "dag" in template:
        problems += _extra(f"{where}.dag", template["dag"], {"tasks", "failFast"})
        for task in template["dag"].get("tasks", []):
            problems += _extra(f"{where} task {task.get('name')}", task, TASK_FIELDS)
            for artifact in task.get("arguments", {}).get("artifacts", []):
                problems.append(f"{where} task {task.get('name')}: artifact {artifact['name']}")
            names = {t.get("name") for t in template["dag"].get("tasks", [])}
            problems += [
                f"{where} task {task.get('name')}: {why}" for why in depends_problems(task, names)
            ]
    if "resource" in template:
        resource = template["resource"]
        problems += _extra(f"{where}.resource", resource, RESOURCE_FIELDS)
        if resource.get("action") != "create":
            problems.append(f"{where}.resource: action {resource.get('action')!r}")
        text = resource.get("manifest", "")
        if "manifestFrom" in resource:
            name = resource["manifestFrom"].get("artifact", {}).get("name")
            raws = {a.get("name"): a.get("raw", {}) for a in inputs.get("artifacts", [])}
            text = raws.get(name, {}).get("data", "")
        if not re.search(r"kind:\s*(PyTorchJob|TrainJob)\b", text):
            problems.append(f"{where}.resource: a manifest other than a PyTorchJob or TrainJob")
    retry = template.get("retryStrategy", {})
    problems += _extra(f"{where}.retryStrategy", retry, RETRY_FIELDS)
    if "backoff" in retry:
        backoff = retry["backoff"]
        problems += _extra(
            f"{where}.retryStrategy.backoff", backoff, {"duration", "factor", "maxDuration"}
        )
    for parameter in template.get("inputs", {}).get("parameters", []):
        problems += _extra(f"{where} input {parameter.get('name')}", parameter, PARAMETER_FIELDS)
    for artifact in inputs.get("artifacts", []):  # raw ones feed resource.manifestFrom
        # (its path, where Argo's executor would write it, matters only in a pod)
        extra = set(artifact) - {"name", "raw", "path"}
        if extra or "manifestFrom" not in template.get("resource", {}):
            problems.append(f"{where}: input artifact {artifact.get('name')}")
    for parameter in template.get("outputs", {}).get("parameters", []):
        problems += _extra(f"{where} output {parameter.get('name')}", parameter, PARAMETER_FIELDS)
        source = set(parameter.get("valueFrom", {})) - {"path", "jsonPath", "default"}
        if source:
            problems.append(f"{where} output {parameter.get('name')}: valueFrom {sorted(source)}")
    for artifact in template.get("outputs", {}).get("artifacts", []):
        problems += _extra(
            f"{where} output artifact {artifact.get('name')}", artifact, OUTPUT_ARTIFACT_FIELDS
        )
    return problems


def parse_duration(text: str | int | float) -> float:
    """Seconds of an Argo duration: ``30``, ``30s``, ``5m``, ``2h``, ``1d``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(text))
    if not match:
        raise UnsupportedFeature(f"duration {text!r} (use a number with s, m, h or d)")
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    return float(match.group(1)) * unit
