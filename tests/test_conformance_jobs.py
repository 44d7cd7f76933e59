"""What the cluster does with the training jobs the workflow creates, checked without one.

For every config in configs/ and both launchers, the WorkflowTemplate is rendered (each
manifest a ``manifestFrom`` raw artifact, filled with the parameters' defaults as Argo
fills it, a multi-node job with ``nodes=2``), and each resource template's
conditions are evaluated as Argo v4.0.5 evaluates them (tests/helpers/argo_conditions.py) against
the statuses each operator gives a job under the job's own restartPolicy:

- Training Operator v1.9.4 (PyTorchJob): conditions through ``pkg/util/status.go``
  (UpdateJobConditions -> setCondition / filterOutCondition), Created on creation
  (``pkg/controller.v1/pytorch/pytorchjob_controller.go`` onOwnerCreateFunc), Running /
  Restarting / Succeeded from UpdateJobStatus there, Failed past the backoff limit or the
  deadline from ``pkg/controller.v1/common/job.go`` ReconcileJobs. Under OnFailure a
  crashing container restarts in place: the pod stays Running, replicaStatuses count it
  active; a pod that does reach Failed (evicted) makes the job Restarting, not Failed.
- Trainer v2.3.0 (TrainJob): the JobSet's Completed / Failed conditions copied as
  Complete / Failed (``pkg/runtime/framework/plugins/jobset/jobset.go`` Status), Failed
  also for the deadline (``pkg/controller/trainjob_controller.go`` reconcileDeadline), set
  with meta.SetStatusCondition, which appends; nothing while pods run or restart.

Expected: succeeded -> the step succeeds; running or restarting -> Argo keeps waiting;
permanently failed -> the step fails. And every job is owned by its workflow as Argo
creates it, and the exit handler's delete finds it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hera.workflows import WorkflowTemplate

from flows import cifar
from flows.cifar import build_template
from flows.cli import main as cli
from flows.local.expr.evaluate import environment, evaluate, render
from flows.manifests import trainjob
from flows.manifests.names import labels
from flows.manifests.shared_pod import config_args
from flows.pipeline.serving_templates import serving_templates
from flows.pipeline.train_templates import delete_when
from steps.common.config import load_config
from tests.helpers import isvc_rollout as ti
from tests.helpers.argo_conditions import outcome, parse
from tests.helpers.flow_helpers import (
    CONFIGS,
    VALIDATOR,
    argo_substitute,
    parameter_values,
    templates,
)

LAUNCHERS = ("pytorchjob", "trainjob")
WORKFLOW_OWNER = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow"}


def training_jobs(path: Path, launcher: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, resource template, job as the API server gets it) for every create."""
    cfg = load_config(path, [f"train.launcher={launcher}"])
    found = []
    data = build_template(cfg).to_dict()
    for name, template in templates(data).items():
        resource = template.get("resource", {})
        if resource.get("action") != "create":
            continue
        # manifestFrom: the raw artifact, the parameters filled as Argo fills them
        assert resource["manifestFrom"] == {"artifact": {"name": "manifest"}}, name
        (artifact,) = template["inputs"]["artifacts"]
        nodes = "2" if name.endswith("multinode") else "1"
        values = parameter_values(data, nodes=nodes)
        text = argo_substitute(artifact["raw"]["data"], values)
        found.append((f"template/{name}", template, yaml.safe_load(text)))
    assert found
    return found


def restart_policies(job: dict[str, Any], path: Path) -> set[str]:
    """The job's pods' restartPolicy: the PyTorchJob's replicas, or the TrainJob runtime's."""
    if job["kind"] == "PyTorchJob":
        return {r["restartPolicy"] for r in job["spec"]["pytorchReplicaSpecs"].values()}
    cfg = load_config(path, ["train.launcher=trainjob"])
    runtime = trainjob.to_manifest(trainjob.build_runtime(cfg, labels(cfg)))
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return {j["template"]["spec"]["template"]["spec"]["restartPolicy"] for j in jobs}


# --- Training Operator v1.9.4: a PyTorchJob's status --------------------------------------
def set_condition(status: dict[str, Any], kind: str, value: str = "True") -> None:
    """pkg/util/status.go setCondition: no change once Failed; the new condition replaces
    one of its type and goes last; Running and Restarting replace each other; Succeeded
    or Failed turns Running False."""
    conditions = status.setdefault("conditions", [])
    if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions):
        return
    kept = []
    for c in conditions:
        if {kind, c["type"]} == {"Running", "Restarting"} or c["type"] == kind:
            continue
        if kind in ("Succeeded", "Failed") and c["type"] == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    status["conditions"] = [*kept, {"type": kind, "status": value, "reason": f"PyTorchJob{kind}"}]


def pytorchjob_status(case: str, replicas: dict[str, int]) -> dict[str, Any]:
    status: dict[str, Any] = {"startTime": "2026-01-01T00:00:00Z"}
    set_condition(status, "Created")  # onOwnerCreateFunc
    active = {kind: {"active": n} for kind, n in replicas.items()}
    if case in ("pending", "failed-past-deadline"):  # the gang is not scheduled yet
        status["replicaStatuses"] = {kind: {} for kind in replicas}
        if case == "failed-past-deadline":  # ReconcileJobs: PastActiveDeadline
            status["completionTime"] = "2026-01-01T06:00:00Z"
            set_condition(status, "Failed")
        return status
    set_condition(status, "Running")
    status["replicaStatuses"] = active
    if case == "running":
        return status
    if case == "restarting-in-place":  # OnFailure: the kubelet restarts the container
        return status  # the pod stays Running and active; nothing in the job's status moves
    if case == "pod-evicted":  # a pod in phase Failed: OnFailure makes the job Restarting
        status["replicaStatuses"] = {**active, "Master": {"failed": 1}}
        set_condition(status, "Restarting")
        return status
    if case == "succeeded":  # UpdateJobStatus: the Master's expected count reaches 0
        status["replicaStatuses"] = {**active, "Master": {"succeeded": 1}}
        status["completionTime"] = "2026-01-01T01:00:00Z"
        set_condition(status, "Succeeded")
        return status
    if case == "failed-after-restarts":
        status["replicaStatuses"] = {**active, "Master": {"failed": 1}}
        set_condition(status, "Restarting")
        status["replicaStatuses"] = active  # recreated, crashing in place again
    # ReconcileJobs, past the backoff limit (PastBackoffLimit counts the restarts)
    status["completionTime"] = "2026-01-01T01:00:00Z"
    set_condition(status, "Failed")
    return status


# --- Trainer v2.3.0: a TrainJob's status ---------------------------------------------------
def trainjob_status(case: str) -> dict[str, Any]:
    def jobs(**counts: int) -> list[dict[str, Any]]:
        base = {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0}
        return [{**base, "suspended": 0, **counts}]

    if case == "pending":
        return {}
    if case in ("running", "restarting-in-place"):
        return {"jobsStatus": jobs(active=1, ready=1)}
    if case == "pod-evicted":  # the Job recreates the pod; JobSet not Failed
        return {"jobsStatus": jobs(active=1, failed=0)}
    if case == "succeeded":
        complete = {"type": "Complete", "status": "True", "reason": "AllJobsCompleted"}
        return {"conditions": [complete], "jobsStatus": jobs(succeeded=1)}
    reason = "FailedJobs" if case == "failed-after-restarts" else "DeadlineExceeded"
    failed = {"type": "Failed", "status": "True", "reason": reason}
    return {"conditions": [failed], "jobsStatus": jobs(failed=1)}


CASES = {  # case -> what Argo must decide
    "pending": "waiting",
    "running": "waiting",
    "restarting-in-place": "waiting",
    "pod-evicted": "waiting",
    "succeeded": "succeeded",
    "failed-after-restarts": "failed",
    "failed-past-deadline": "failed",
}


def status_of(job: dict[str, Any], case: str) -> dict[str, Any]:
    if job["kind"] == "TrainJob":
        return trainjob_status(case)
    replicas = {k: r["replicas"] for k, r in job["spec"]["pytorchReplicaSpecs"].items()}
    return pytorchjob_status(case, replicas)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_step_ends_as_the_job_ends(path: Path, launcher: str) -> None:
    for where, template, job in training_jobs(path, launcher):
        assert restart_policies(job, path) == {"OnFailure"}, where  # the statuses assume it
        resource = template["resource"]
        success, failure = resource["successCondition"], resource["failureCondition"]
        parse(success), parse(failure)  # labels.Parse takes them
        decided = {
            c: outcome({**job, "status": status_of(job, c)}, success, failure) for c in CASES
        }
        assert decided == CASES, where


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_created_job_is_owned_by_its_workflow(path: Path, launcher: str) -> None:
    """What Argo does with the owner (v4.0.5 workflow/controller/operator.go
    executeResource): ``setOwnerReference`` adds the workflow to ``resource.manifest``
    only; argoexec creates a ``manifestFrom`` artifact's text as it is
    (cmd/argoexec/commands/resource.go execResource). So the owner must be in the text."""
    for where, template, job in training_jobs(path, launcher):
        resource = template["resource"]
        owners = list(job["metadata"].get("ownerReferences", []))
        if resource.get("setOwnerReference") and "manifest" in resource:
            owners.append({**WORKFLOW_OWNER, "name": "{{workflow.name}}", "uid": "(Argo's)"})
        workflows = [o for o in owners if {k: o.get(k) for k in WORKFLOW_OWNER} == WORKFLOW_OWNER]
        assert len(workflows) == 1, (where, owners)
        (owner,) = workflows
        assert owner["name"] == "{{workflow.name}}" and owner["uid"].startswith(("{{", "(")), where
        assert sum(bool(o.get("controller")) for o in owners) <= 1, where  # API server rule


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_exit_handler_deletes_the_job_it_finds(path: Path, launcher: str) -> None:
    """Argo runs a delete with no manifest as ``kubectl delete --ignore-not-found <flags>
    -o name`` (v4.0.5 workflow/executor/resource.go getKubectlArguments) and refuses
    conditions or outputs on it (cmd/argoexec/commands/resource.go execResource); the
    selector must select every job the run creates, under the resource name of its kind."""
    cfg = load_config(path, [f"train.launcher={launcher}"])
    wf = build_template(cfg).to_dict()
    found = templates(wf)
    exit_tasks = {t["name"]: t for t in found[wf["spec"]["onExit"]]["dag"]["tasks"]}
    task = exit_tasks["delete-train-job"]
    assert task["when"] == delete_when()  # which runs: test_the_job_is_deleted_only_...
    delete = found[task["template"]]
    resource = delete["resource"]
    assert resource["action"] == "delete" and "outputs" not in delete
    assert not {"manifest", "manifestFrom", "successCondition", "failureCondition"} & set(resource)
    plural, flag, selector = resource["flags"]
    key, value = selector.split("=", 1)
    assert flag == "--selector"
    for where, _, job in training_jobs(path, launcher):
        kind = job["kind"].lower()
        group = job["apiVersion"].split("/")[0]
        assert plural == f"{kind}s.{group}", where
        assert job["metadata"]["labels"][key] == value == "{{workflow.name}}", where


@pytest.mark.skipif(not VALIDATOR.is_file(), reason="../shared (the schema validator) is absent")
def test_every_render_and_its_jobs_pass_the_crds(tmp_path: Path, capsys) -> None:
    """``--render`` (and ``--cron``) for every config and launcher, through the strict
    validator, which fills each manifestFrom raw artifact's parameters and checks the job
    against its CRD."""
    files = []
    for path in CONFIGS:
        for launcher in LAUNCHERS:
            for cron in ([], ["--cron"]):
                args = ["--config", str(path), "--set", f"train.launcher={launcher}"]
                assert cli.main([*args, "--render", *cron], cifar) == 0
                files.append(tmp_path / f"{path.stem}-{launcher}-{len(cron)}.yaml")
                files[-1].write_text(capsys.readouterr().out)
    done = subprocess.run(
        [sys.executable, str(VALIDATOR), *map(str, files)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(f"{2 * len(files)} documents checked, 0 problems")
    assert "job manifests from manifestFrom raw artifacts checked too" in done.stdout


# --- the champion's InferenceService (KServe v0.19.0, tests/helpers/kserve_status.py) -----


def applied_services(path: Path) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, resource template, service as applied) for every ``apply`` of the rendered
    pipeline (once its DAG holds the deploy step) and of flows.pipeline.serving_templates itself."""
    cfg = load_config(path, [])
    docs = [("template", build_template(cfg).to_dict())]
    with WorkflowTemplate(name="serving", entrypoint="deploy") as serving:
        serving_templates(cfg, config_args(cfg))
    docs.append(("serving_step", serving.to_dict()))
    found = []
    for form, data in docs:
        for name, template in templates(data).items():
            if template.get("resource", {}).get("action") == "apply":
                found.append((f"{form}/{name}", template, ti.applied(template)))
    assert {entry[0].split("/")[1] for entry in found} >= {"deploy", "rollback-apply"}
    return found


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_an_applied_service_ends_the_step_as_its_rollout_ends(path: Path) -> None:
    """Ready succeeds, a failed rollout fails (where the template has a failure condition:
    a rollback has none, the failure it recovers from still shows), anything else waits;
    the service is owned by nothing (it outlives the workflow)."""
    for where, template, service in applied_services(path):
        assert service["kind"] == "InferenceService", where
        assert "ownerReferences" not in service["metadata"], where
        resource = template["resource"]
        assert not resource.get("setOwnerReference"), where
        success, failure = resource["successCondition"], resource.get("failureCondition", "")
        decided = {
            case: outcome({**service, "status": ti.status_of(case)}, success, failure)
            for case in ti.DEPLOY
        }
        wanted = {c: o if failure or o != "failed" else "waiting" for c, o in ti.DEPLOY.items()}
        assert decided == wanted, where


# --- which failed runs delete their training job ----------------------------------------


def failed_node(template: str, message: str = "", phase: str = "Failed") -> dict[str, Any]:
    """An entry of Argo's ``{{workflow.failures}}`` (v4.0.5 workflow/controller/operator.go
    failedNodeStatus)."""
    return {
        "displayName": template,
        "message": message,
        "templateName": template,
        "phase": phase,
        "podName": f"cifar-abcde-{template}-1234567890",
        "finishedAt": "2026-01-01T00:00:00Z",
    }


DAG_FAILED = failed_node("pipeline", "child 'cifar-abcde-1' failed")
DELETE_CASES = {  # case -> (workflow status, failed nodes, delete the job?)
    "job-failed": ("Failed", [DAG_FAILED, failed_node("train", "job failed")], True),
    "multinode-failed": ("Failed", [DAG_FAILED, failed_node("train-multinode")], True),
    "stopped-while-training": (
        "Failed",
        [DAG_FAILED, failed_node("train", "Stopped with strategy 'Stop'")],
        True,
    ),
    "train-errored": ("Error", [failed_node("train", "pod deleted", "Error")], True),
    "optimize-failed": ("Failed", [DAG_FAILED, failed_node("optimize", "exit code 1")], False),
    "deploy-failed": (
        "Failed",
        [DAG_FAILED, failed_node("deploy"), failed_node("serve-check")],
        False,
    ),
    "stage-failed": ("Failed", [DAG_FAILED, failed_node("stage")], False),  # no job yet
    "succeeded": ("Succeeded", [], False),
}


def _delete_runs(when: str, status: str, failures: str) -> bool:
    tag = re.fullmatch(r"\{\{=(.*)\}\}", when, re.DOTALL)
    assert tag, when
    scope = {"workflow.status": status, "workflow.failures": failures}
    value = render(evaluate(tag[1], environment(scope)))
    assert value in ("true", "false"), value  # what govaluate then reads as a boolean
    return value == "true"


@pytest.mark.parametrize("case", DELETE_CASES)
def test_the_job_is_deleted_only_when_training_did_not_succeed(case: str) -> None:
    """A training job is deleted (its GPUs freed) when training failed, errored or was
    stopped; a job that succeeded keeps its finished pods, which hold the ranks' logs,
    whatever failed after it (issue 30, defect 8). ``workflow.failures`` as Argo v4.0.5
    sets it (operator.go: json.Marshal, then strconv.Quote) and as the local runner does
    (json.dumps, flows/local/workflow.py)."""
    status, nodes, wanted = DELETE_CASES[case]
    argo = json.dumps(json.dumps(nodes or None, separators=(",", ":")))
    local = json.dumps(nodes)
    for form in (argo, local):
        assert _delete_runs(delete_when(), status, form) is wanted, (case, form)
