"""What the local runner understands of an Argo Workflow: the fields and ``{{...}}`` tags it
implements, the fields it accepts with no local effect, and the rest refused by name.

The runner is for one machine, not an engine: before it starts anything it walks the
manifest and refuses, by name, every field and expression it does not implement. Fields
that only matter to a cluster scheduler (images, resources, security contexts, node
selection) are accepted and have no effect here.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from flows.local.checks.resources import resource_problems
from flows.local.conditions.depends import depends_problems
from flows.local.expr.evaluate import problems as expression_problems
from flows.local.nodes.loops import LOOP_FIELDS
from flows.local.pods.script import script_interpreter_problem
from flows.local.substitution import EXPRESSION, expressions

SUPPORTED_EXPRESSIONS = (
    re.compile(r"inputs\.parameters\.[\w-]+"),
    re.compile(r"(tasks|steps)\.[\w-]+\.outputs\.(result|parameters(\.[\w-]+)?)"),
    re.compile(r"(tasks|steps)\.[\w-]+\.(exitCode|status)"),
    re.compile(
        r"workflow\.(name|namespace|uid|status|creationTimestamp|serviceAccountName|duration|failures)"
    ),
    re.compile(r"workflow\.(parameters|outputs\.parameters)\.[\w-]+"),
    re.compile(r"retries|lastRetry\.(exitCode|status|duration|message)"),
)
RETRY_EXPRESSION = SUPPORTED_EXPRESSIONS[-1]  # only in a pod's template with a retryStrategy
ITEM_EXPRESSION = re.compile(r"item(\.[\w-]+)?")  # only in a looping task or step

# Per part of the manifest: fields implemented, and fields accepted with no local effect.
SPEC_FIELDS = {
    "entrypoint", "templates", "arguments", "onExit", "parallelism", "activeDeadlineSeconds",
    "synchronization",
}  # fmt: skip
SPEC_IGNORED = {
    "serviceAccountName", "ttlStrategy", "podGC", "securityContext", "podMetadata",
    "workflowMetadata", "imagePullSecrets", "nodeSelector", "tolerations", "affinity",
    "priorityClassName", "podPriorityClassName", "archiveLogs",
    "artifactRepositoryRef", "hostNetwork", "dnsPolicy",
    "automountServiceAccountToken", "executor", "podDisruptionBudget", "schedulerName",
    # the clean-up of a deleted workflow's artifacts: it changes nothing of how a run ends
    "artifactGC",
}  # fmt: skip
# spec.synchronization: mutexes, held across this machine's runs (flows.local.synchronization);
# a semaphore's limit lives in a ConfigMap and a database lock in Argo's database: none here
SYNCHRONIZATION_FIELDS = {"mutexes"}
MUTEX_FIELDS = {"name", "namespace"}
TEMPLATE_FIELDS = {
    "name", "container", "script", "dag", "steps", "resource", "inputs", "outputs",
    "retryStrategy", "activeDeadlineSeconds", "timeout", "memoize", "parallelism", "failFast",
}  # fmt: skip
TEMPLATE_IGNORED = {
    # "annotations" is no Template field: Argo drops it (examples/loops-param-argument.yaml)
    "metadata", "annotations", "securityContext", "serviceAccountName", "nodeSelector",
    "tolerations", "affinity", "archiveLocation", "priorityClassName",
    "automountServiceAccountToken", "podSpecPatch", "schedulerName", "priority",
    # the account of the executor's init and wait containers: no executor here
    "executor",
}  # fmt: skip
CONTAINER_FIELDS = {"name", "image", "imagePullPolicy", "command", "args", "env", "envFrom"}
CONTAINER_IGNORED = {"resources", "securityContext", "ports", "terminationMessagePath"}
STEP_FIELDS = {"name", "template", "arguments", "continueOn", "when", *LOOP_FIELDS}
TASK_FIELDS = STEP_FIELDS | {"dependencies", "depends"}
SEQUENCE_FIELDS = {"count", "start", "end", "format"}
RETRY_FIELDS = {"limit", "backoff", "retryPolicy", "affinity", "expression"}
BACKOFF_FIELDS = {"duration", "factor", "cap", "maxDuration"}
PARAMETER_FIELDS = {"name", "value", "default", "valueFrom", "globalName", "description", "enum"}
OUTPUT_ARTIFACT_FIELDS = {"name", "path", "archive", "globalName", "optional"}
OUTPUT_ARTIFACT_IGNORED = {"artifactGC"}  # when the repository deletes it: none here


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
    synchronization = spec.get("synchronization") or {}
    problems += _extra("spec.synchronization", synchronization, SYNCHRONIZATION_FIELDS)
    for mutex in synchronization.get("mutexes") or []:
        problems += _extra("spec.synchronization.mutexes[]", mutex, MUTEX_FIELDS)
        if not mutex.get("name"):
            problems.append("spec.synchronization.mutexes[]: a mutex without a name")
    for template in spec.get("templates", []):
        where = f"template {template.get('name')}"
        problems += _extra(where, template, TEMPLATE_FIELDS, TEMPLATE_IGNORED)
        problems += _check_template(where, template)
    outside, looping = _split_loops(spec)
    outside_expressions = set(expressions(outside))
    in_loops = (*SUPPORTED_EXPRESSIONS, ITEM_EXPRESSION)
    for found, known in (
        (outside_expressions, SUPPORTED_EXPRESSIONS),
        (set(expressions(looping)) - outside_expressions, in_loops),
    ):
        for expression in sorted(found):
            if not expression.startswith("=") and not any(p.fullmatch(expression) for p in known):
                problems.append(f"expression {{{{{expression}}}}}")
    for template in spec.get("templates", []):  # an expression tag: by what it calls
        for expression in dict.fromkeys(expressions(template)):
            if expression.startswith("="):
                problems += [
                    f"template {template.get('name')} expression {{{{{expression}}}}}: {why}"
                    for why in expression_problems(expression[1:])
                ]
    return problems


def _split_loops(spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The spec without its looping tasks and steps, and those tasks and steps: ``{{item}}``
    has a value only in the latter."""
    outside = copy.deepcopy(dict(spec))
    looping: list[Any] = []
    for template in outside.get("templates", []):
        if not isinstance(template, dict):
            continue
        groups = [template.get("dag", {}).get("tasks", []), *(template.get("steps") or [])]
        for group in groups:
            if not isinstance(group, list):
                continue
            looping += [t for t in group if isinstance(t, dict) and _loops(t)]
            group[:] = [t for t in group if not (isinstance(t, dict) and _loops(t))]
    return outside, looping


def _loops(task: Mapping[str, Any]) -> bool:
    return any(field in task for field in LOOP_FIELDS)


def _check_task(where: str, task: Mapping[str, Any], fields: set[str]) -> list[str]:
    """A DAG task or a step: its fields, argument artifacts, continueOn and loop."""
    problems = _extra(where, task, fields)
    for artifact in task.get("arguments", {}).get("artifacts", []):
        problems.append(f"{where}: artifact {artifact['name']}")
    problems += _extra(f"{where}.continueOn", task.get("continueOn") or {}, {"failed", "error"})
    if sum(field in task for field in LOOP_FIELDS) > 1:
        problems.append(f"{where}: more than one of {', '.join(LOOP_FIELDS)}")
    if "withSequence" in task:
        problems += _extra(f"{where}.withSequence", task["withSequence"], SEQUENCE_FIELDS)
    if "withItems" in task and not isinstance(task["withItems"], list):
        problems.append(f"{where}: withItems is not a list")
    return problems


def _check_template(where: str, template: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    inputs = template.get("inputs", {})
    kinds = [k for k in ("container", "script", "dag", "steps", "resource") if k in template]
    if len(kinds) != 1:
        return problems  # the unknown kind (suspend, http...) is reported already
    composite = "dag" in template or "steps" in template
    if "script" in template:
        script = template["script"]
        problems += _extra(
            f"{where}.script", script, CONTAINER_FIELDS | {"source"}, CONTAINER_IGNORED
        )
        problem = script_interpreter_problem(where, script)
        problems += [problem] if problem else []
    if "failFast" in template and not composite:  # a DAG's or steps template's field
        problems.append(f"{where}: failFast")
    if "retryStrategy" not in template or composite:  # the attempt's number: a pod's retries
        for expression in sorted(
            {e for e in expressions(template) if RETRY_EXPRESSION.fullmatch(e)}
        ):
            problems.append(f"{where}: {{{{{expression}}}}} without a retryStrategy")
    for field in ("memoize", "retryStrategy", "activeDeadlineSeconds"):
        if composite and field in template:  # Argo retries a whole DAG; not done here
            problems.append(f"{where}: {field} on a {kinds[0]} template")
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
        tasks = template["dag"].get("tasks", [])
        names = {t.get("name") for t in tasks}
        for task in tasks:
            problems += _check_task(f"{where} task {task.get('name')}", task, TASK_FIELDS)
            problems += [
                f"{where} task {task.get('name')}: {why}" for why in depends_problems(task, names)
            ]
    if "steps" in template:
        for group in template["steps"] or []:
            if not isinstance(group, list):
                problems.append(f"{where}.steps: a group that is not a list of steps")
                continue
            for step in group:
                problems += _check_task(f"{where} step {step.get('name')}", step, STEP_FIELDS)
    if "resource" in template:
        problems += resource_problems(where, template)
    retry = template.get("retryStrategy", {})
    problems += _extra(f"{where}.retryStrategy", retry, RETRY_FIELDS)
    if "backoff" in retry:
        backoff = retry["backoff"]
        problems += _extra(f"{where}.retryStrategy.backoff", backoff, BACKOFF_FIELDS)
    problems += _expr_problems(f"{where}.retryStrategy.expression", retry.get("expression"))
    for parameter in inputs.get("parameters", []):
        problems += _extra(f"{where} input {parameter.get('name')}", parameter, PARAMETER_FIELDS)
    for artifact in inputs.get("artifacts", []):  # raw ones feed resource.manifestFrom
        # (its path, where Argo's executor would write it, matters only in a pod)
        extra = set(artifact) - {"name", "raw", "path"}
        if extra or "manifestFrom" not in template.get("resource", {}):
            problems.append(f"{where}: input artifact {artifact.get('name')}")
    for parameter in template.get("outputs", {}).get("parameters", []):
        problems += _extra(f"{where} output {parameter.get('name')}", parameter, PARAMETER_FIELDS)
        # a pod's outputs come from its files, a DAG's or steps' from its tasks' outputs
        allowed = {"parameter", "expression"} if composite else {"path", "jsonPath"}
        source = set(parameter.get("valueFrom", {})) - allowed - {"default"}
        if source:
            problems.append(f"{where} output {parameter.get('name')}: valueFrom {sorted(source)}")
        expression = parameter.get("valueFrom", {}).get("expression")
        problems += _expr_problems(f"{where} output {parameter.get('name')}", expression)
    for artifact in template.get("outputs", {}).get("artifacts", []):
        problems += _extra(
            f"{where} output artifact {artifact.get('name')}",
            artifact,
            OUTPUT_ARTIFACT_FIELDS,
            OUTPUT_ARTIFACT_IGNORED,
        )
    return problems


def _expr_problems(where: str, text: str | None) -> list[str]:
    """An expr-lang field (not a {{=...}} tag): its tags are filled first, so a stand-in."""
    if text is None:
        return []
    bare = EXPRESSION.sub("nil", str(text))
    return [f"{where} {text!r}: {why}" for why in expression_problems(bare)]
