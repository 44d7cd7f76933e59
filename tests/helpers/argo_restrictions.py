"""Argo's workflow restrictions (docs/workflow-restrictions.md) as the v4.0.5 controller
applies them to a Workflow, each operation (a test helper).

argoproj/argo-workflows v4.0.5:
- ``config/config.go``: ``workflowRestrictions.templateReferencing`` is ``Strict`` or
  ``Secure``; ``MustUseReference`` holds for both, ``MustNotChangeSpec`` for Secure alone.
- ``workflow/controller/operator.go`` ``setExecWorkflow``, first thing ``operate`` does on
  every operation of a Workflow (an error here marks it Error and returns: nothing else of
  the operation runs, its exit handler included):
  - a Workflow with ``spec.workflowTemplateRef``: under a restriction, any field of its spec
    outside ``allowedUserOverrideFields`` errs (``workflow/util/merge.go``
    ``ValidateUserOverrides``, "fields [..] are not permitted ..."); then
    ``setStoredWfSpec``; what runs is ``status.storedWorkflowTemplateSpec``;
  - a Workflow with templates of its own: under a restriction, an error ("workflows must
    use workflowTemplateRef ..."); without one, its own spec runs.
- ``setStoredWfSpec``: the stored spec is read from the Workflow's status; only when there
  is none is the WorkflowTemplate fetched. When the stored spec needs an update (none yet,
  or the Workflow's suspend or shutdown changed: ``needsStoredWfSpecUpdate``) it becomes
  the Workflow's spec (under a restriction, only its allow-listed fields:
  ``SanitizeUserWorkflowSpec``) joined over that template (``JoinWorkflowSpec``: the
  Workflow's fields win). Otherwise, under Secure only, the WorkflowTemplate is fetched
  again, joined the same way and compared with the stored spec: a difference errs
  ("WorkflowSpec may not change during execution ..."); Strict keeps the stored spec.

The join is Kubernetes' strategic merge of the two specs (``MergeTo``): maps merged key by
key, lists of named items (templates, parameters) merged by name, a Workflow's parameter
replacing the template's of its name whole; the Workflow's value wins. Workflow defaults
(none in this install's controller ConfigMap), metadata joins and the spec's validation
are left out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

STRICT, SECURE = "Strict", "Secure"
# v4.0.5 pkg/apis/workflow/v1alpha1/workflow_types.go WorkflowSpec: Go field -> JSON name
SPEC_FIELDS = {
    "Templates": "templates",
    "Entrypoint": "entrypoint",
    "Arguments": "arguments",
    "ServiceAccountName": "serviceAccountName",
    "AutomountServiceAccountToken": "automountServiceAccountToken",
    "Executor": "executor",
    "Volumes": "volumes",
    "VolumeClaimTemplates": "volumeClaimTemplates",
    "Parallelism": "parallelism",
    "ArtifactRepositoryRef": "artifactRepositoryRef",
    "Suspend": "suspend",
    "NodeSelector": "nodeSelector",
    "Affinity": "affinity",
    "Tolerations": "tolerations",
    "ImagePullSecrets": "imagePullSecrets",
    "HostNetwork": "hostNetwork",
    "DNSPolicy": "dnsPolicy",
    "DNSConfig": "dnsConfig",
    "OnExit": "onExit",
    "TTLStrategy": "ttlStrategy",
    "ActiveDeadlineSeconds": "activeDeadlineSeconds",
    "Priority": "priority",
    "SchedulerName": "schedulerName",
    "PodGC": "podGC",
    "PodPriorityClassName": "podPriorityClassName",
    "HostAliases": "hostAliases",
    "SecurityContext": "securityContext",
    "PodSpecPatch": "podSpecPatch",
    "PodDisruptionBudget": "podDisruptionBudget",
    "Metrics": "metrics",
    "Shutdown": "shutdown",
    "WorkflowTemplateRef": "workflowTemplateRef",
    "Synchronization": "synchronization",
    "VolumeClaimGC": "volumeClaimGC",
    "RetryStrategy": "retryStrategy",
    "PodMetadata": "podMetadata",
    "TemplateDefaults": "templateDefaults",
    "ArchiveLogs": "archiveLogs",
    "Hooks": "hooks",
    "WorkflowMetadata": "workflowMetadata",
    "ArtifactGC": "artifactGC",
}
# workflow/util/merge.go allowedUserOverrideFields: what a Workflow by reference may set
ALLOWED_OVERRIDES = {
    "Arguments",
    "Entrypoint",
    "Shutdown",
    "Suspend",
    "ActiveDeadlineSeconds",
    "Priority",
    "TTLStrategy",
    "PodGC",
    "VolumeClaimGC",
    "ArchiveLogs",
    "WorkflowMetadata",
    "WorkflowTemplateRef",
    "Metrics",
    "ArtifactGC",
}
# Go string fields: "" is their zero value (ValidateUserOverrides compares with the zero)
STRING_FIELDS = {
    "Entrypoint",
    "ServiceAccountName",
    "DNSPolicy",
    "OnExit",
    "SchedulerName",
    "PodPriorityClassName",
    "PodSpecPatch",
    "Shutdown",
}
REFERENCE_REQUIRED = (
    "workflows must use workflowTemplateRef to be executed when the controller is in reference mode"
)
SPEC_CHANGED = (
    "WorkflowSpec may not change during execution when the controller is set "
    "`templateReferencing: Secure`"
)


class WorkflowError(Exception):
    """The controller marks the Workflow Error with this message (markWorkflowError)."""


def must_use_reference(restriction: str | None) -> bool:
    return restriction in (STRICT, SECURE)


def must_not_change_spec(restriction: str | None) -> bool:
    return restriction == SECURE


def _is_set(go_name: str, value: Any) -> bool:
    return value is not None and not (go_name in STRING_FIELDS and value == "")


def override_violations(spec: Mapping[str, Any]) -> list[str]:
    """``ValidateUserOverrides``: the Go names of the set fields outside the allow-list,
    sorted; an unknown key is one the API server would have pruned (schema), so none."""
    return sorted(
        go
        for go, name in SPEC_FIELDS.items()
        if go not in ALLOWED_OVERRIDES and _is_set(go, spec.get(name))
    )


def sanitized(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``SanitizeUserWorkflowSpec``: only the allow-listed fields."""
    allowed = {SPEC_FIELDS[go] for go in ALLOWED_OVERRIDES}
    return {k: copy.deepcopy(v) for k, v in spec.items() if k in allowed}


def _named(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(i, dict) and "name" in i for i in items)


def _merge(winner: Any, other: Any, key: str = "") -> Any:
    if isinstance(winner, dict) and isinstance(other, dict):
        out = copy.deepcopy(other)
        for k, v in winner.items():
            out[k] = _merge(v, other[k], k) if k in other else copy.deepcopy(v)
        return out
    if _named(winner) and _named(other):
        mine = {i["name"]: i for i in winner}
        merged = [
            copy.deepcopy(mine[i["name"]])
            if key == "parameters" and i["name"] in mine
            else _merge(mine[i["name"]], i)
            if i["name"] in mine
            else copy.deepcopy(i)
            for i in other
        ]
        seen = {i["name"] for i in other}
        return merged + [copy.deepcopy(i) for i in winner if i["name"] not in seen]
    return copy.deepcopy(winner)


def joined(user: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """``JoinWorkflowSpec``: the Workflow's spec over the WorkflowTemplate's."""
    return _merge(dict(user), dict(template))


def _fetch(wf: Mapping[str, Any], templates: Mapping[str, Mapping[str, Any]]) -> dict:
    name = wf["spec"]["workflowTemplateRef"]["name"]
    if name not in templates:
        raise WorkflowError(f'workflowtemplates.argoproj.io "{name}" not found')
    return dict(templates[name]["spec"])


def _needs_update(wf: Mapping[str, Any], stored: Mapping[str, Any] | None) -> bool:
    spec = wf["spec"]
    return (
        stored is None
        or (bool(spec.get("entrypoint")) and not stored.get("entrypoint"))
        or spec.get("suspend") != stored.get("suspend")
        or spec.get("shutdown") != stored.get("shutdown")
    )


def set_exec_workflow(
    wf: dict[str, Any],
    templates: Mapping[str, Mapping[str, Any]],
    restriction: str | None,
) -> dict[str, Any]:
    """One operation's ``setExecWorkflow``: the spec the controller executes. Writes the
    stored spec into ``wf["status"]`` as the controller does; raises WorkflowError."""
    spec = wf["spec"]
    if "workflowTemplateRef" not in spec:
        if must_use_reference(restriction):
            raise WorkflowError(REFERENCE_REQUIRED)
        return copy.deepcopy(spec)
    if must_use_reference(restriction) and (found := override_violations(spec)):
        raise WorkflowError(
            f"fields [{' '.join(found)}] are not permitted when using workflowTemplateRef "
            "with templateReferencing restriction"
        )
    status = wf.setdefault("status", {})
    stored = status.get("storedWorkflowTemplateSpec")
    user = sanitized(spec) if must_use_reference(restriction) else spec
    if _needs_update(wf, stored):
        base = _fetch(wf, templates) if stored is None else stored
        status["storedWorkflowTemplateSpec"] = joined(user, base)
    elif must_not_change_spec(restriction) and joined(user, _fetch(wf, templates)) != stored:
        raise WorkflowError(SPEC_CHANGED)
    return copy.deepcopy(status["storedWorkflowTemplateSpec"])
