"""A stopped run restores the champion (issue 38 item 8), what Argo runs after each way of
stopping a workflow, and the registry logic each path relies on.

Argo v4.0.5, read at the tag (``fetch github:argoproj/argo-workflows``):
- pkg/apis/workflow/v1alpha1/workflow_types.go ``ShutdownStrategy.ShouldExecute(isOnExitPod)``:
  Terminate -> false, Stop -> isOnExitPod, none -> true;
- workflow/controller/workflowpod.go ``createWorkflowPod``: when ``ShouldExecute(onExitPod)``
  is false the node is marked Failed ("workflow shutdown with strategy: ...") and no pod is
  made: a rollback task reached after the stop never runs;
- workflow/controller/exec_control.go ``applyExecutionControl``: a Pending or Running pod
  that should not execute has its containers terminated and its node Failed;
- workflow/controller/operator.go: the onExit node is executed when
  ``ShouldExecute(true)`` (so not after a Terminate).

``SHOULD_EXECUTE`` below is that table; the rendered workflow is checked against it: after a
Stop only the exit handler's templates run, and they hold the restore; after a Terminate
nothing runs, and the next run's benchmark restores (``restore_left_alias``)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from flows.cifar import EXIT_HANDLER, build_template
from steps.benchmark.previous import restore_left_alias, served_lookup
from steps.common.config import load_config
from steps.serve_check.restore import failed_templates, restore
from tests.helpers.flow_helpers import templates
from tests.helpers.paths import REPO_ROOT

# (shutdown strategy, the pod is the exit handler's) -> a pod is made / kept running
SHOULD_EXECUTE = {
    ("", False): True,
    ("", True): True,
    ("Stop", False): False,
    ("Stop", True): True,
    ("Terminate", False): False,
    ("Terminate", True): False,
}


def runs_after(strategy: str, wf: dict[str, Any]) -> set[str]:
    """The templates whose pods Argo makes once the workflow is shut down with ``strategy``:
    those reached from the exit handler when it executes at all (operator.go), filtered by
    ``createWorkflowPod``'s check."""
    found = templates(wf)
    exit_names: set[str] = set()
    if SHOULD_EXECUTE[(strategy, True)]:
        pending = [EXIT_HANDLER]
        while pending:
            name = pending.pop()
            exit_names.add(name)
            pending += [t["template"] for t in found[name].get("dag", {}).get("tasks", [])]
    pods = {n for n, t in found.items() if "container" in t or "resource" in t}
    return {n for n in pods if SHOULD_EXECUTE[(strategy, n in exit_names)]}


def test_a_stopped_workflow_runs_the_restore_and_a_terminated_one_nothing() -> None:
    wf = build_template(load_config(REPO_ROOT / "configs" / "cluster.yaml")).to_dict()
    stop = runs_after("Stop", wf)
    # the main DAG's rollbacks never run after a stop ...
    assert not stop & {"deploy", "serve-check", "rollback-alias"}
    # ... the exit handler's restore does: the alias, then the service back
    assert {"restore-champion", "rollback-apply", "rollback-delete", "close-run"} <= stop
    (handler,) = [t for n, t in templates(wf).items() if n == EXIT_HANDLER]
    tasks = {t["name"]: t for t in handler["dag"]["tasks"]}
    assert tasks["restore-champion"]["when"] == "{{workflow.status}} != Succeeded"
    for name, template in (
        ("restore-apply", "rollback-apply"),
        ("restore-delete", "rollback-delete"),
    ):
        assert tasks[name]["template"] == template
        assert tasks[name]["depends"] == "restore-champion.Succeeded"
        assert "tasks.restore-champion.outputs.parameters.restore-service" in tasks[name]["when"]
    assert runs_after("Terminate", wf) == set()
    assert "deploy" in runs_after("", wf)


@pytest.mark.parametrize(
    ("failures", "names"),
    [
        (json.dumps([{"displayName": "x", "templateName": "rollback-apply"}]), {"rollback-apply"}),
        (json.dumps(json.dumps([{"templateName": "deploy"}])), {"deploy"}),  # Argo's quoting
        ("null", set()),
        ("", set()),
        ("not json", set()),
    ],
)
def test_the_restore_reads_workflow_failures_in_either_form(failures: str, names: set) -> None:
    assert failed_templates(failures) == names


# --- the registry, on a real MLflow server ------------------------------------------------


class Registry:
    """A registered model of its own, versions with the tags the benchmark writes, and the
    pipeline runs that promoted them."""

    def __init__(self, uri: str) -> None:
        self.client = MlflowClient(uri)
        self.name = f"restore-{uuid.uuid4().hex[:8]}"
        self.client.create_registered_model(self.name)
        self.experiment = self.client.create_experiment(self.name)

    def run(self, status: str | None, **tags: str) -> str:
        run = self.client.create_run(self.experiment, tags=tags).info.run_id
        if status:
            self.client.set_terminated(run, status=status)
        return run

    def version(self, run: str, previous: str, promoted: bool = True) -> str:
        version = self.client.create_model_version(self.name, "s3://nowhere/model").version
        tags = {"mlflow_run_id": run, "previous_champion": previous or "none"}
        tags |= {"accuracy": "0.9", "promotion": f"{'promoted' if promoted else 'rejected'}: x"}
        for key, value in tags.items():
            self.client.set_model_version_tag(self.name, version, key, value)
        if promoted:
            self.client.set_registered_model_alias(self.name, "champion", version)
        return str(version)

    def alias(self) -> str | None:
        try:
            return self.client.get_model_version_by_alias(self.name, "champion").version
        except MlflowException:
            return None


@pytest.fixture
def registry(mlflow_server) -> Registry:
    return Registry(mlflow_server.uri)


def test_a_stopped_run_puts_back_the_champion_it_replaced(registry: Registry) -> None:
    served = registry.version(registry.run("FINISHED", **{"argo.workflow": "w1"}), "")
    this = registry.run(None, **{"argo.workflow": "w2"})
    new = registry.version(this, served)
    done, service, previous = restore(
        registry.client, registry.name, "champion", this, set(), "stopped in serve-check"
    )
    assert (service, previous) == (True, served)
    assert done == f"alias champion of {registry.name} moved back from v{new} to v{served}"
    assert registry.alias() == served
    version_tags = registry.client.get_model_version(registry.name, new).tags
    assert version_tags["serving.rollback"] == "stopped in serve-check"
    assert registry.client.get_run(this).data.tags["serving.rollback"].startswith("stopped")
    # a second restore (a retried exit handler) moves nothing more
    again = restore(registry.client, registry.name, "champion", this, set(), "again")
    assert again == (
        f"alias champion of {registry.name} already back on v{served}: nothing to restore",
        False,
        "",
    )


def test_a_stopped_first_champion_leaves_no_alias(registry: Registry) -> None:
    this = registry.run(None, **{"argo.workflow": "w"})
    registry.version(this, "")
    _, service, previous = restore(registry.client, registry.name, "champion", this, set(), "r")
    assert (service, previous) == (True, "")  # the service is deleted
    assert registry.alias() is None


@pytest.mark.parametrize(
    "case",
    ["check-passed", "moved-by-someone-else", "promoted-nothing", "alias-back-service-stopped"],
)
def test_what_a_restore_leaves_alone(registry: Registry, case: str) -> None:
    served = registry.version(registry.run("FINISHED"), "")
    this = registry.run(None, **{"argo.workflow": "w"})
    new = registry.version(this, served, promoted=case != "promoted-nothing")
    failures: set[str] = set()
    if case == "check-passed":
        registry.client.set_tag(this, "serving.passed", "true")
    elif case == "moved-by-someone-else":  # a later run promoted (and checked) its own
        registry.version(registry.run("FINISHED"), new)
    elif case == "alias-back-service-stopped":  # rollback-alias ran, rollback-apply was stopped
        registry.client.set_registered_model_alias(registry.name, "champion", served)
        failures = {"serve-check", "rollback-apply"}
    holder = registry.alias()
    done, service, previous = restore(
        registry.client, registry.name, "champion", this, failures, "r"
    )
    assert registry.alias() == holder  # the alias not moved
    wanted = {
        "check-passed": (False, f"v{new} passed its live check: kept"),
        "moved-by-someone-else": (False, f"points at v{holder}, not this run's v{new}"),
        "promoted-nothing": (False, f"run {this} promoted no version"),
        "alias-back-service-stopped": (True, "rollback-apply did not finish: the service goes"),
    }[case]
    assert service is wanted[0] and wanted[1] in done, done
    if service:
        assert previous == served


# --- after argo terminate: the next run's benchmark ---------------------------------------


@pytest.mark.parametrize(
    ("promoter", "restored"),
    [
        ({"status": None, "argo.workflow": "terminated-wf"}, True),  # never ended, no check
        ({"status": "KILLED", "argo.workflow": "w"}, True),  # closed, its restore failed
        ({"status": "FAILED", "argo.workflow": "w"}, True),
        ({"status": None, "argo.workflow": "w", "serving.passed": "true"}, False),
        ({"status": "FINISHED", "argo.workflow": "w"}, False),
        ({"status": None}, False),  # a run of a step started alone, not a workflow's
        ({"status": "KILLED", "argo.workflow": "w", "rolled back by hand": "1"}, False),
    ],
    ids=[
        "terminated",
        "killed",
        "failed",
        "running-checked",
        "finished",
        "not-a-workflow",
        "put-back-by-hand",
    ],
)
def test_the_next_run_restores_an_alias_left_by_a_run_that_did_not_succeed(
    registry: Registry, promoter: dict[str, str], restored: bool
) -> None:
    older = registry.version(registry.run("FINISHED", **{"argo.workflow": "w0"}), "")
    # the champion before the left one did not serve either: the restore goes back past it
    unserved = registry.version(registry.run("FAILED", **{"argo.workflow": "w1"}), older)
    tags = {k: v for k, v in promoter.items() if k not in ("status", "rolled back by hand")}
    left_by = registry.run(promoter["status"], **tags)
    left = registry.version(left_by, unserved)
    if "rolled back by hand" in promoter:  # rolled back once, then put back by a person
        registry.client.set_model_version_tag(registry.name, left, "serving.rollback", "x")
    this = registry.run(None, **{"argo.workflow": "the-next-run"})
    done = restore_left_alias(registry.client, registry.name, "champion", this)
    if not restored:
        assert done is None and registry.alias() == left
        return
    assert registry.alias() == older
    assert f"alias champion left on v{left} by run {left_by}, which " in done
    assert done.endswith(f"restored to v{older} before run {this} decided")
    assert registry.client.get_model_version(registry.name, left).tags["serving.rollback"] == done
    assert served_lookup(registry.client, registry.name, this)(left)["served"] is False
    # this run's own promotion, still running, is never taken for a left one
    assert restore_left_alias(registry.client, registry.name, "champion", left_by) is None


def test_a_left_first_champion_is_removed(registry: Registry) -> None:
    left_by = registry.run(None, **{"argo.workflow": "terminated-wf"})
    registry.version(left_by, "")
    done = restore_left_alias(registry.client, registry.name, "champion", "the-next-run")
    assert done is not None and "restored to no version (its first champion)" in done
    assert registry.alias() is None


@pytest.mark.slow
def test_the_benchmark_puts_a_left_alias_back_before_it_decides(
    bundle, mlflow_server, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real benchmark step after a terminated run: the alias sits on a version no model
    here could lose to (accuracy tag 0), left by a workflow run that never ended; the step
    restores the champion before it (accuracy 2: none beats it) and decides against that
    one, so nothing is promoted and the alias stays on the champion that served."""
    from steps.benchmark import step as benchmark
    from tests.helpers.model_bundle import champion_args

    registry = Registry(mlflow_server.uri)
    served = registry.version(registry.run("FINISHED", **{"argo.workflow": "w0"}), "")
    registry.client.set_model_version_tag(registry.name, served, "accuracy", "2.0")
    left_by = registry.run(None, **{"argo.workflow": "terminated-wf"})
    left = registry.version(left_by, served)
    registry.client.set_model_version_tag(registry.name, left, "accuracy", "0.0")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    out = tmp_path / "out"
    result = benchmark.run(
        champion_args(bundle, tmp_path / "report", registry.name, outputs_dir=out)
    )
    assert result.promoted is False
    assert registry.alias() == served
    assert (out / "previous-version").read_text() == served
    reason = registry.client.get_model_version(registry.name, left).tags["serving.rollback"]
    assert f"by run {left_by}, which never ended and never passed its live check" in reason
    new = (out / "model-version").read_text()
    promotion = registry.client.get_model_version(registry.name, new).tags["promotion"]
    assert promotion.startswith("rejected: ") and f"champion v{served} " in promotion
