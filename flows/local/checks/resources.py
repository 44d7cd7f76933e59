"""What the local runner accepts of a resource template, checked before anything starts:
``action: create`` of a PyTorchJob or TrainJob; the exit handler's delete of the run's job
by Argo's workflow label; ``action: apply`` of a ``serving.kserve.io/v1beta1``
InferenceService (inline or ``manifestFrom``), and ``action: delete`` of one by name
(``flags: [inferenceservices.serving.kserve.io, NAME]``) or by its manifest. Argo runs a
delete as ``kubectl delete --ignore-not-found <flags> [-f manifest]`` (argo-workflows
v4.0.5 workflow/executor/resource.go getKubectlArguments), so ``--ignore-not-found`` in
the flags is accepted and changes nothing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flows.local.pods.manifest import manifest_of, serves, service_delete_name

RESOURCE_FIELDS = {
    "action", "manifest", "manifestFrom", "successCondition", "failureCondition",
    "setOwnerReference", "flags",
}  # fmt: skip
# The one job delete run here: the run's own job by Argo's workflow label (an exit handler's)
DELETABLE_JOBS = ("pytorchjobs.kubeflow.org", "trainjobs.trainer.kubeflow.org")
WORKFLOW_SELECTOR = "workflows.argoproj.io/workflow={{workflow.name}}"


def service_problems(where: str, template: Mapping[str, Any]) -> list[str] | None:
    """Problems of an InferenceService resource template ([] when it runs here), or None
    when the template is no InferenceService apply or delete (the other checks apply)."""
    resource = template.get("resource", {})
    if resource.get("action") == "delete":
        if service_delete_name(resource) is None:
            return None
        extra = sorted(set(resource) - {"action", "flags", "manifest"})
        return [f"{where}.resource: {', '.join(extra)} on a delete"] if extra else []
    if not serves(template):
        return None
    problems = [f"{where}.resource: flags"] if "flags" in resource else []
    if "memoize" in template:  # a memo hit would start no server for later tasks
        problems.append(f"{where}: memoize on an InferenceService apply")
    return problems


def resource_problems(where: str, template: Mapping[str, Any]) -> list[str]:
    """Everything in a resource template the local runner would not honour."""
    resource = template["resource"]
    known = RESOURCE_FIELDS
    problems = [f"{where}.resource: {key}" for key in resource if key not in known]
    served = service_problems(where, template)  # an InferenceService's apply or delete
    if served is not None:
        return problems + served
    if resource.get("action") == "delete":
        return problems + delete_problems(where, resource)
    if resource.get("action") != "create":
        return [*problems, f"{where}.resource: action {resource.get('action')!r}"]
    problems += [f"{where}.resource: flags"] if "flags" in resource else []
    if not re.search(r"kind:\s*(PyTorchJob|TrainJob)\b", manifest_of(template)):
        problems.append(
            f"{where}.resource: a manifest other than a PyTorchJob or TrainJob "
            "(or an InferenceService with action apply)"
        )
    return problems


def delete_problems(where: str, resource: Mapping[str, Any]) -> list[str]:
    """A job delete runs locally only as the exit handler's clean-up of the run's own
    training job: no manifest, flags ``[<PyTorchJob or TrainJob resource>, --selector,
    <the workflow's label>]``."""
    flags = resource.get("flags", [])
    rest = sorted(set(resource) - {"action", "flags"})
    if rest or len(flags) != 3 or flags[0] not in DELETABLE_JOBS:
        return [f"{where}.resource: a delete other than of the run's {' or '.join(DELETABLE_JOBS)}"]
    if flags[1:] not in (["--selector", WORKFLOW_SELECTOR], ["-l", WORKFLOW_SELECTOR]):
        return [f"{where}.resource: a delete by other than --selector {WORKFLOW_SELECTOR}"]
    return []
