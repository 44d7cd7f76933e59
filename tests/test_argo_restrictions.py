"""Argo v4.0.5's workflowRestrictions as the controller applies them
(tests/helpers/argo_restrictions.py, citing config/config.go,
workflow/controller/operator.go setExecWorkflow and setStoredWfSpec,
workflow/util/merge.go), what each of Strict and Secure does with a Workflow, and why the
install sets Strict (configs/cluster/argo/workflow-controller-configmap.yaml): the
pipeline's runs (what --submit, --cron --submit and the local runner send) are references
with allow-listed overrides only, so Strict runs them, and a run keeps the spec stored at
its start when --submit updates its template.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from flows import cifar
from steps.common.config import PipelineConfig, load_config
from tests.helpers import argo_restrictions as argo
from tests.helpers import cluster_build as cb
from tests.helpers.flow_helpers import CONFIGS
from tests.helpers.paths import REPO_ROOT

RESTRICTIONS = [None, argo.STRICT, argo.SECURE]
# the Workflow CRD the install applies (argo's cluster-install takes base/crds/full)
WORKFLOW_CRD = "argo/manifests/base/crds/full/argoproj.io_workflows.yaml"


def config(name: str = "cluster", *sets: str) -> PipelineConfig:
    return load_config(REPO_ROOT / "configs" / f"{name}.yaml", list(sets))


def installed(cfg: PipelineConfig) -> dict[str, dict[str, Any]]:
    template = cifar.build_template(cfg).to_dict()
    return {template["metadata"]["name"]: template}


def run_of(cfg: PipelineConfig, **values: str) -> dict[str, Any]:
    return cifar.build_submission(cfg, values or None).to_dict()


def test_the_install_sets_strict() -> None:
    doc = yaml.safe_load((cb.CLUSTER / "argo" / "workflow-controller-configmap.yaml").read_text())
    restrictions = yaml.safe_load(doc["data"]["workflowRestrictions"])
    assert restrictions == {"templateReferencing": argo.STRICT}


@pytest.mark.parametrize("restriction", RESTRICTIONS)
def test_a_workflow_with_templates_of_its_own_runs_only_unrestricted(
    restriction: str | None,
) -> None:
    cfg = config()
    inline = {
        "metadata": {"generateName": "x-"},
        "spec": cifar.build_template(cfg).to_dict()["spec"],
    }
    inline["spec"]["serviceAccountName"] = "argo-server"
    if restriction is None:
        assert (
            argo.set_exec_workflow(inline, {}, restriction)["serviceAccountName"] == "argo-server"
        )
    else:
        with pytest.raises(argo.WorkflowError, match="must use workflowTemplateRef"):
            argo.set_exec_workflow(inline, {}, restriction)


OVERRIDES = {  # a Workflow by reference setting a field of its own: Argo's Go name
    "serviceAccountName": ("argo-server", "ServiceAccountName"),
    "podSpecPatch": ('{"hostNetwork":true}', "PodSpecPatch"),
    "executor": ({"serviceAccountName": "argo-server"}, "Executor"),
    "templates": ([{"name": "x", "container": {"image": "busybox"}}], "Templates"),
    "templateDefaults": ({"serviceAccountName": "argo-server"}, "TemplateDefaults"),
    "volumes": ([{"name": "h", "hostPath": {"path": "/"}}], "Volumes"),
    "hostNetwork": (True, "HostNetwork"),
    "securityContext": ({"runAsUser": 0}, "SecurityContext"),
    "onExit": ("rollback-delete", "OnExit"),
    "hooks": ({"exit": {"template": "rollback-delete"}}, "Hooks"),
}


def carries(merged: Any, value: Any) -> bool:
    """Whether the join kept the Workflow's ``value``: a map's keys, a list's items."""
    if isinstance(value, dict):
        return all(carries(merged.get(k), v) for k, v in value.items())
    if isinstance(value, list):
        return all(item in merged for item in value)
    return merged == value


@pytest.mark.parametrize("field", OVERRIDES)
@pytest.mark.parametrize("restriction", RESTRICTIONS)
def test_a_reference_may_override_only_the_allow_list(field: str, restriction: str | None) -> None:
    """Unrestricted, the Workflow's field wins over its template's (the hole: any account,
    any pod patch); restricted, the Workflow errs, naming the field as Argo's Go name."""
    cfg = config()
    value, go_name = OVERRIDES[field]
    wf = run_of(cfg)
    wf["spec"][field] = value
    if restriction is None:
        assert carries(argo.set_exec_workflow(wf, installed(cfg), restriction)[field], value)
        return
    message = f"fields [{go_name}] are not permitted when using workflowTemplateRef"
    with pytest.raises(argo.WorkflowError, match=message.replace("[", r"\[").replace("]", r"\]")):
        argo.set_exec_workflow(wf, installed(cfg), restriction)


@pytest.mark.parametrize("restriction", [argo.STRICT, argo.SECURE])
def test_the_allow_list_lets_a_reference_name_artifact_gcs_account(restriction: str) -> None:
    """ArtifactGC is allow-listed (merge.go), its serviceAccountName and podSpecPatch with
    it: the artifact GC pod (artifact_gc.go createArtifactGCPod) would run as that account,
    patched. The admission policy refuses such a Workflow (test_cluster_admission_workflows.py,
    test_each_way_to_another_account_is_stopped_by_a_layer)."""
    cfg = config()
    wf = run_of(cfg)
    wf["spec"]["artifactGC"] = {"serviceAccountName": "argo-server", "podSpecPatch": "{}"}
    executed = argo.set_exec_workflow(wf, installed(cfg), restriction)
    assert executed["artifactGC"]["serviceAccountName"] == "argo-server"


def updated(cfg: PipelineConfig) -> dict[str, dict[str, Any]]:
    """The template as a later --submit leaves it: a new revision, another default."""
    templates = installed(cfg)
    (template,) = templates.values()
    template["spec"]["workflowMetadata"]["annotations"]["cifar-pipeline/git-revision"] = "b2"
    template["spec"]["arguments"]["parameters"][2]["value"] = "30"
    return templates


def test_strict_runs_the_spec_stored_at_the_runs_start() -> None:
    cfg = config()
    wf = run_of(cfg, epochs="3")
    first = argo.set_exec_workflow(wf, installed(cfg), argo.STRICT)
    assert wf["status"]["storedWorkflowTemplateSpec"] == first
    assert argo.set_exec_workflow(wf, updated(cfg), argo.STRICT) == first


def test_secure_errs_a_run_whose_template_changed() -> None:
    """A --submit updating the template (every run carries the git revision) errors the
    run in flight at its next operation: setExecWorkflow fails first in operate, which
    returns; the exit handler that restores the champion never runs."""
    cfg = config()
    wf = run_of(cfg, epochs="3")
    argo.set_exec_workflow(wf, installed(cfg), argo.SECURE)
    assert argo.set_exec_workflow(wf, installed(cfg), argo.SECURE)  # unchanged: runs on
    with pytest.raises(argo.WorkflowError, match="may not change during execution"):
        argo.set_exec_workflow(wf, updated(cfg), argo.SECURE)


def test_a_stored_spec_its_creator_wrote_runs_under_strict_alone() -> None:
    """The Workflow CRD has no status subresource: whoever creates a Workflow may write its
    status. Strict reads the stored spec from there and runs it; Secure compares it with
    the template and errs. The admission policy refuses such a Workflow before either
    (test_cluster_admission_workflows.py, test_a_workflow_created_with_a_stored_spec_is_refused)."""
    cfg = config()
    forged = cifar.build_template(cfg).to_dict()["spec"]
    forged["serviceAccountName"] = "argo-server"
    for restriction in (argo.STRICT, argo.SECURE):
        wf = run_of(cfg)
        wf["status"] = {"storedWorkflowTemplateSpec": copy.deepcopy(forged)}
        if restriction == argo.STRICT:
            executed = argo.set_exec_workflow(wf, installed(cfg), restriction)
            assert executed["serviceAccountName"] == "argo-server"
        else:
            with pytest.raises(argo.WorkflowError, match="may not change"):
                argo.set_exec_workflow(wf, installed(cfg), restriction)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
@pytest.mark.parametrize("launcher", ["pytorchjob", "trainjob"])
def test_the_pipelines_runs_run_under_strict(path, launcher: str) -> None:
    """What --submit and the local runner send (a reference with -p values) and what the
    CronWorkflow's runs carry: Strict runs the template with those arguments."""
    cfg = load_config(path, [f"train.launcher={launcher}"])
    template = cifar.build_template(cfg).to_dict()
    cron = cifar.build_cron_workflow(cfg, {"epochs": "2"}).to_dict()
    runs = [run_of(cfg), run_of(cfg, epochs="2"), {"spec": cron["spec"]["workflowSpec"]}]
    for wf in runs:
        assert argo.override_violations(wf["spec"]) == []
        executed = argo.set_exec_workflow(wf, installed(cfg), argo.STRICT)
        given = {
            p["name"]: p["value"] for p in wf["spec"].get("arguments", {}).get("parameters", [])
        }
        parameters = {p["name"]: p["value"] for p in executed["arguments"]["parameters"]}
        defaults = {p["name"]: p["value"] for p in template["spec"]["arguments"]["parameters"]}
        assert parameters == {**defaults, **given}
        assert executed["templates"] == template["spec"]["templates"]
        assert executed["serviceAccountName"] == cfg.cluster.service_account


def test_the_models_fields_are_the_workflow_crds() -> None:
    """SPEC_FIELDS is WorkflowSpec's JSON names: the vendored v4.0.5 CRD's spec, exactly."""
    source = cb.vendor_source()
    if source is None:
        pytest.skip(f"no vendored Argo CRDs ({cb.POPULATE}, or ../shared/vendor/cluster)")
    crd = yaml.load((source / WORKFLOW_CRD).read_text(), Loader=yaml.CSafeLoader)
    (version,) = crd["spec"]["versions"]
    properties = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(properties) == set(argo.SPEC_FIELDS.values())
    assert set(argo.SPEC_FIELDS) >= argo.ALLOWED_OVERRIDES | argo.STRING_FIELDS
