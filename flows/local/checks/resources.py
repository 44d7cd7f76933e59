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

import yaml

RESOURCE_FIELDS = {
    "action", "manifest", "manifestFrom", "successCondition", "failureCondition",
    "setOwnerReference", "flags",
}  # fmt: skip
# The one job delete run here: the run's own job by Argo's workflow label (an exit handler's)
DELETABLE_JOBS = ("pytorchjobs.kubeflow.org", "trainjobs.trainer.kubeflow.org")
WORKFLOW_SELECTOR = "workflows.argoproj.io/workflow={{workflow.name}}"
INFERENCESERVICE_API = "serving.kserve.io/v1beta1"
INFERENCESERVICE_RESOURCE = "inferenceservices.serving.kserve.io"  # kubectl's name of it
IGNORED_DELETE_FLAGS = ("--ignore-not-found", "--ignore-not-found=true", "--wait=false")
_KIND = re.compile(r"""["']?kind["']?\s*:\s*["']?InferenceService\b""")


def manifest_of(template: Mapping[str, Any]) -> str:
    """The resource's manifest text: inline, or the raw input artifact ``manifestFrom``
    names ("" when neither)."""
    resource = template.get("resource", {})
    if "manifest" in resource:
        return str(resource["manifest"])
    name = resource.get("manifestFrom", {}).get("artifact", {}).get("name")
    for artifact in template.get("inputs", {}).get("artifacts", []):
        if artifact.get("name") == name and "raw" in artifact:
            return str(artifact["raw"].get("data", ""))
    return ""


def names_inferenceservice(text: str) -> bool:
    """Whether a manifest's text (YAML or JSON, maybe with ``{{...}}`` tags) is an
    InferenceService of KServe's v1beta1 API."""
    return bool(_KIND.search(text)) and INFERENCESERVICE_API in text


def serves(template: Mapping[str, Any]) -> bool:
    """An ``action: apply`` of an InferenceService: a process that outlives its node."""
    resource = template.get("resource", {})
    return resource.get("action") == "apply" and names_inferenceservice(manifest_of(template))


def service_delete_name(resource: Mapping[str, Any]) -> str | None:
    """The InferenceService a delete names (by flags or by manifest), else None."""
    flags = [f for f in resource.get("flags", []) if f not in IGNORED_DELETE_FLAGS]
    if len(flags) == 2 and flags[0] == INFERENCESERVICE_RESOURCE and "manifest" not in resource:
        return None if str(flags[1]).startswith("-") else str(flags[1])  # --all: no name
    text = str(resource.get("manifest", ""))
    if not flags and names_inferenceservice(text):
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
        name = document.get("metadata", {}).get("name") if isinstance(document, dict) else None
        return str(name) if name else None
    return None


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
