"""What runs, whatever a Workflow or CronWorkflow says (issue 38): an inline run is
refused; each way a Workflow could run a pod as another account is stopped by one of two
layers, the install's admission policy (tests/helpers/admission_policies.py) or the
workflow controller's templateReferencing: Strict (as Argo v4.0.5 applies it,
tests/helpers/argo_restrictions.py), the table saying which; and a Workflow's status is
the controller's alone to write."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from steps.common.config import PipelineConfig
from tests.helpers import argo_restrictions as argo
from tests.helpers import cluster_build as cb
from tests.helpers.admission_policies import params_of
from tests.helpers.admission_workflows import (
    ACCOUNTS,
    FOREIGN,
    Change,
    config,
    hostile_template,
    policy,
    refusals,
    rendered,
    template_of,
)

# --- hostile runs: Workflows and CronWorkflows --------------------------------------------


def inline_run(kind: str, cfg: PipelineConfig) -> dict[str, Any]:
    """A Workflow or CronWorkflow with the pipeline's own templates inline: admitted
    otherwise, it would escape nothing here but Argo's templateReferencing."""
    obj = rendered(cfg)[1 if kind == "Workflow" else 2]
    spec = obj["spec"] if kind == "Workflow" else obj["spec"]["workflowSpec"]
    inline = template_of(cfg)["spec"]
    spec.pop("workflowTemplateRef")
    spec.update(inline)
    return obj


@pytest.mark.parametrize("kind", ["Workflow", "CronWorkflow"])
def test_an_inline_run_is_refused(kind: str) -> None:
    cfg = config()
    (message,) = refusals(inline_run(kind, cfg), params_of(cfg))
    assert "runs a WorkflowTemplate by reference" in message
    hostile = inline_run(kind, cfg)
    spec = hostile["spec"] if kind == "Workflow" else hostile["spec"]["workflowSpec"]
    spec["serviceAccountName"] = FOREIGN
    found = refusals(hostile, params_of(cfg))
    assert len(found) == 2 and ACCOUNTS in found[1], found


# Each way a Workflow (created by the submitter) could run a pod as another account, and
# which layer stops it: the admission policy (at the API server, before anything runs) or
# Argo's Strict templateReferencing (the controller marks the Workflow Error, no pod). The
# hostile WorkflowTemplate is the one the submitter may create or update.
def _by_reference(change: Change) -> Callable[[PipelineConfig], dict[str, Any]]:
    def build(cfg: PipelineConfig) -> dict[str, Any]:
        wf = rendered(cfg)[1]
        change(wf)
        return wf

    return build


def _forged_status(wf: dict[str, Any]) -> None:
    spec = template_of(config())["spec"]
    spec["serviceAccountName"] = FOREIGN
    wf["status"] = {"storedWorkflowTemplateSpec": spec}


ATTEMPTS = {  # name -> (the Workflow, its WorkflowTemplate hostile?, admission, Strict)
    "inline templates": (lambda cfg: inline_run("Workflow", cfg), False, True, True),
    "a spec-level account": (
        _by_reference(lambda wf: wf["spec"].update(serviceAccountName=FOREIGN)),
        False,
        True,
        True,
    ),
    "a podSpecPatch": (
        _by_reference(lambda wf: wf["spec"].update(podSpecPatch='{"serviceAccountName":"x"}')),
        False,
        True,
        True,
    ),
    "artifact GC's account (Argo's allow-list lets a reference set it)": (
        _by_reference(lambda wf: wf["spec"].update(artifactGC={"serviceAccountName": FOREIGN})),
        False,
        True,
        False,
    ),
    "a stored spec written into its status (Strict runs it)": (
        _by_reference(_forged_status),
        False,
        True,
        False,
    ),
    "a hostile WorkflowTemplate it refers to": (_by_reference(lambda wf: None), True, True, False),
}


def runs_as_foreign(exec_spec: dict[str, Any]) -> bool:
    found = [
        exec_spec.get("serviceAccountName"),
        exec_spec.get("artifactGC", {}).get("serviceAccountName"),
    ]
    return FOREIGN in found or "podSpecPatch" in exec_spec


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_each_way_to_another_account_is_stopped_by_a_layer(attempt: str) -> None:
    cfg = config()
    build, hostile, by_admission, by_strict = ATTEMPTS[attempt]
    wf = build(cfg)
    template = hostile_template(cfg) if hostile else template_of(cfg)
    assert bool(refusals(wf, params_of(cfg)) or refusals(template, params_of(cfg))) is by_admission
    templates = {template["metadata"]["name"]: template}
    try:
        executed = argo.set_exec_workflow(copy.deepcopy(wf), templates, argo.STRICT)
    except argo.WorkflowError:
        assert by_strict
    else:
        assert not by_strict and runs_as_foreign(executed)
    assert by_admission or by_strict


# --- a Workflow's status: only the controller writes what runs ---------------------------

STATUS = "only the workflow controller writes what a Workflow's status says runs"


def refused_for_status(wf: dict[str, Any], params: dict[str, Any], **request: Any) -> bool:
    found = refusals(wf, params, **request)
    return len(found) == 1 and found[0].startswith(STATUS)


def test_a_workflow_created_with_a_stored_spec_is_refused() -> None:
    cfg = config()
    wf = rendered(cfg)[1]
    _forged_status(wf)
    assert refused_for_status(wf, params_of(cfg))
    for field, value in (
        ("nodes", {"x": {"phase": "Succeeded"}}),
        ("storedTemplates", {"namespaced/cifar-pipeline/stage": {"name": "stage"}}),
        ("phase", "Running"),
    ):
        wf["status"] = {field: value}
        assert refused_for_status(wf, params_of(cfg)), field


# What a Workflow's status says that the controller does not act on (times, progress,
# messages, conditions, costs, artifact GC's bookkeeping): a creator may leave it.
INFORMATIONAL = {
    "startedAt",
    "finishedAt",
    "estimatedDuration",
    "progress",
    "message",
    "conditions",
    "resourcesDuration",
    "artifactGCStatus",
}
WORKFLOW_CRD = "argo/manifests/base/crds/full/argoproj.io_workflows.yaml"


def refused_on_create() -> set[str]:
    vap, _ = policy()
    (rule,) = [v for v in vap["spec"]["validations"] if v["message"].startswith(STATUS)]
    return set(re.findall(r"!has\(object\.status\.(\w+)\)", rule["expression"]))


def test_every_status_field_the_controller_acts_on_is_refused_on_create() -> None:
    cfg = config()
    for field in sorted(refused_on_create()):
        wf = rendered(cfg)[1]
        wf["status"] = {field: "x"}
        assert refused_for_status(wf, params_of(cfg)), field
    source = cb.vendor_source()
    if source is None:
        pytest.skip(f"no vendored Argo CRDs ({cb.POPULATE}, or ../shared/vendor/cluster)")
    crd = yaml.load((source / WORKFLOW_CRD).read_text(), Loader=yaml.CSafeLoader)
    (version,) = crd["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status) == refused_on_create() | INFORMATIONAL
    assert not refused_on_create() & INFORMATIONAL


def test_a_workflow_created_with_an_empty_status_is_admitted() -> None:
    """Argo's Go clients (the argo-server's CreateWorkflow) send the zero status: its
    times null, which the API server prunes, leaving {}."""
    cfg = config()
    wf = rendered(cfg)[1]
    wf["status"] = {}
    assert refusals(wf, params_of(cfg)) == []


def test_an_update_may_not_change_the_stored_spec() -> None:
    cfg = config()
    old = rendered(cfg)[1]
    old["metadata"]["name"] = "cifar-x7k2p"
    stored = template_of(cfg)["spec"]
    old["status"] = {"phase": "Failed", "storedWorkflowTemplateSpec": stored, "nodes": {}}
    retried = copy.deepcopy(old)  # `argo retry`: the phase and nodes reset, the spec kept
    retried["status"].update(phase="Running", nodes={"x": {"phase": "Pending"}})
    assert refusals(retried, params_of(cfg), operation="UPDATE", old=old) == []
    forged = copy.deepcopy(old)
    forged["status"]["storedWorkflowTemplateSpec"]["serviceAccountName"] = FOREIGN
    assert refused_for_status(forged, params_of(cfg), operation="UPDATE", old=old)
    dropped = copy.deepcopy(old)
    del dropped["status"]["storedWorkflowTemplateSpec"]
    assert refused_for_status(dropped, params_of(cfg), operation="UPDATE", old=old)
