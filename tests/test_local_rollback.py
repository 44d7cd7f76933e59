"""The whole pipeline with its live check made to fail: the smoke config (made smaller, see
below) run here exactly as ``python flows/cifar.py`` runs it (the WorkflowTemplate and a
Workflow referring to it), against a real SeaweedFS S3 server and a real ``mlflow
server``, with one change made by the task handler (the runner's test seam): serve-check
is given a time limit no check can meet. What follows is the pipeline's own doing: the
step fails and moves the alias back, the DAG's ``rollback-delete`` (a first deployment)
deletes the InferenceService, so its local server is stopped, and ``rollback-apply`` is
Skipped (no earlier version). A second run against a champion it cannot beat leaves the
alias where it is: deploy and serve-check Skipped.

Then deploy as a transaction (issue 30) over a previous version that serves, as the
cluster's InferenceService outlives the workflow that deployed it: the previous champion's
server is up, as the runner starts it, before each run. The handler starts the new
version's server late (``start_service``): never, or after a few seconds within
``serving.ready_timeout_s``. Every run uses the smoke config made smaller (one epoch, one
optimize variant, one batch size, one check concurrency: tests/helpers/pipeline_runs.py's SMALL)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path

import psutil
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from flows.cifar import build_submission, build_template
from flows.cli.here import localize
from flows.local.pods.processes import ProcessSpec, SubprocessHandler
from flows.local.pods.services import service_process
from flows.local.servers.mlflow_server import MLflowServer
from flows.local.signals import STOP_MESSAGE, RunStopped
from flows.local.status import RunResult
from flows.local.workflow import LocalRunner
from flows.manifests.inferenceservice import build_inferenceservice
from flows.manifests.shared_pod import config_args
from steps.common.config import load_config
from steps.common.serving.client import ServingClient, ServingError
from tests.helpers.buckets import S3Bucket
from tests.helpers.paths import REPO_ROOT
from tests.helpers.pipeline_runs import SMALL

pytestmark = pytest.mark.slow
MODEL = "cifar-rollback-test"  # a model no other test registers: this run's is the first


class CheckMadeToFail(SubprocessHandler):
    """Runs every task as the runner would; serve-check with ``--time-limit-s 0.001``."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    def run(self, spec: ProcessSpec, log: Path, tail: deque[str]) -> int:
        if "steps.serve_check" in spec.argv:
            self.checks += 1
            spec.argv = [*spec.argv, "--time-limit-s", "0.001"]
        return super().run(spec, log, tail)


def test_a_failed_live_check_rolls_back_the_first_deployment(
    s3_bucket: S3Bucket, mlflow_server: MLflowServer, tmp_path: Path
) -> None:
    overrides = [
        *SMALL,  # the smoke config made smaller: the check fails on its time limit
        f"storage.root_uri={s3_bucket.uri}/rollback",
        f"storage.endpoint_url={s3_bucket.server.endpoint}",
        f"tracking.uri={mlflow_server.uri}",
        f"benchmark.registered_model={MODEL}",
    ]
    cwd = tmp_path / "work"
    cwd.mkdir()
    cfg = localize(load_config(REPO_ROOT / "configs" / "smoke.yaml", overrides), cwd)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env |= {"CIFAR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO_ROOT)}
    handler = CheckMadeToFail()

    def run_pipeline(handler: SubprocessHandler, refresh: tuple[str, ...] = ()) -> RunResult:
        return LocalRunner(
            build_submission(cfg).to_dict(),
            cwd / "runs",
            handler=handler,
            cwd=cwd,
            env=env,
            workflow_templates=[build_template(cfg).to_dict()],
            cache_dir=tmp_path / "cache",
            refresh=refresh,
        ).run()

    result = run_pipeline(handler)

    states = {name: task.state.value for name, task in result.tasks.items()}
    # the verdict (exit 3) is final: one attempt, which moved the alias back
    assert handler.checks == result.tasks["serve-check"].attempts == 1
    assert states["benchmark"] == "Succeeded"
    assert result.tasks["benchmark"].outputs["promoted"] == "true"
    assert result.tasks["benchmark"].outputs["previous-version"] == ""
    assert states["deploy"] == "Succeeded"
    assert states["serve-check"] == "Failed"
    assert states["rollback-delete"] == "Succeeded"
    assert states["rollback-apply"] == "Skipped"
    assert states["rollback-alias"] == "Succeeded"  # serve-check moved it: nothing left to do
    alias_log = (result.run_dir / "logs" / "rollback-alias.log").read_text()
    assert "already back on no version (first champion): nothing to roll back" in alias_log
    # Argo's DAG phase is its leaves' (v4.0.5 workflow/controller/dag.go assessDAGPhase), and
    # a Skipped leaf takes its parent's phase (workflow_types.go: Skipped is not Completed):
    # rollback-apply carries serve-check's Failed, so the run ends Failed, rollback or not.
    assert result.status == "Failed"
    check_log = (result.run_dir / "logs" / "serve-check.log").read_text()
    # the time limit ran out while the check waited for the version, or while it measured
    url = result.tasks["deploy"].outputs["url"]
    assert f"serve_check: error: {url}: " in check_log, check_log[-2000:]
    assert f"alias champion of {MODEL} removed" in check_log, check_log[-2000:]

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    version = result.tasks["benchmark"].outputs["model-version"]
    with pytest.raises(MlflowException, match="champion"):
        client.get_model_version_by_alias(MODEL, "champion")
    assert url in client.get_model_version(MODEL, version).tags["serving.rollback"]
    run = client.get_run(result.globals["workflow.outputs.parameters.mlflow-run-id"])
    assert run.info.status == "FAILED"  # the exit handler's close-run, from workflow.status
    assert url in run.data.tags["serving.rollback"]
    assert "**Rollback**" in run.data.tags["mlflow.note.content"]

    # The deleted service's server is gone, and nothing listens on its port.
    state = json.loads((result.run_dir / "state.json").read_text())
    (service,) = state["services"].values()
    assert service["state"] == "Stopped"
    assert not psutil.pid_exists(service["pid"])
    port = int(service["url"].rsplit(":", 1)[1])
    assert all(c.laddr.port != port for c in psutil.net_connections() if c.status == "LISTEN")

    # Run again against a champion no model here can beat (its accuracy tag set by hand to
    # 2): the alias stays where it is, so deploy and serve-check are Skipped, the rollbacks
    # Omitted (their depends never met), nothing is served and the run Succeeds. The
    # benchmark is refreshed (as --refresh benchmark): its earlier decision is not
    # reused; stage, train and optimize are (their keys did not change).
    client.set_model_version_tag(MODEL, version, "accuracy", "2.0")
    client.set_registered_model_alias(MODEL, "champion", version)
    again = run_pipeline(SubprocessHandler(), refresh=("benchmark",))
    states = {name: task.state.value for name, task in again.tasks.items()}
    assert again.status == "Succeeded", again.failed_task
    assert again.tasks["benchmark"].outputs["promoted"] == "false"
    assert states["deploy"] == states["serve-check"] == "Skipped"
    assert states["rollback-apply"] == states["rollback-delete"] == "Omitted"
    assert states["rollback-alias"] == "Omitted"
    assert client.get_model_version_by_alias(MODEL, "champion").version == version
    assert json.loads((again.run_dir / "state.json").read_text()).get("services", {}) == {}
    assert {states[t] for t in ("stage", "train", "optimize")} == {"Cached"}


# --- deploy as a transaction, over a previous version that serves ---------------------

TXN_MODEL = "cifar-transaction-test"
READY_TIMEOUT_S = 25  # serving.ready_timeout_s: the deploy's deadline and the check's wait
LATE_S = 8  # the new server of the slow run: ready this long after its start
WAIT_THEN_RUN = (
    "import os, sys, time; delay = float(sys.argv[1]); "
    "time.sleep(delay if delay >= 0 else 1e9); os.execvp(sys.argv[2], sys.argv[2:])"
)


class LateNewServer(SubprocessHandler):
    """Runs every task as the runner would, and starts the run's InferenceService servers
    too, except that a server for another version than ``previous`` starts serving only
    after ``late_s`` (None: never). At ``close-run`` (the exit handler, while the run's
    service is still up) it asks the endpoint what it serves."""

    def __init__(self, previous: str, late_s: float | None) -> None:
        super().__init__()
        self.previous, self.late_s, self.url = previous, late_s, ""
        self.served_at_end: list[str] | None = None
        self.late: list[str] = []

    def start_service(self, spec: ProcessSpec, sink):
        model = spec.argv[spec.argv.index("--model-uri") + 1]
        if model != f"models:/{TXN_MODEL}/{self.previous}":
            self.late.append(model)
            delay = -1 if self.late_s is None else self.late_s
            spec.argv = [sys.executable, "-c", WAIT_THEN_RUN, str(delay), *spec.argv]
        return super().start_service(spec, sink)

    def run(self, spec: ProcessSpec, log: Path, tail: deque[str]) -> int:
        if "steps.tracking" in spec.argv and "end" in spec.argv:
            with contextlib.suppress(ServingError, OSError), ServingClient(self.url, 5) as client:
                self.served_at_end = client.served_versions(TXN_MODEL)
        return super().run(spec, log, tail)


@pytest.fixture(scope="module")
def transaction(tmp_path_factory: pytest.TempPathFactory, mlflow_server: MLflowServer) -> dict:
    """A first run that deploys v1 and checks it (the previous version of the next runs),
    and what the next runs need."""
    root = tmp_path_factory.mktemp("transaction")
    cwd = root / "work"
    cwd.mkdir()
    # the smoke config made smaller: accuracy is compared, not asserted
    overrides = [*SMALL, f"benchmark.registered_model={TXN_MODEL}"]
    overrides.append(f"tracking.uri={mlflow_server.uri}")
    overrides.append(f"serving.ready_timeout_s={READY_TIMEOUT_S}")
    cfg = localize(load_config(REPO_ROOT / "configs" / "smoke.yaml", overrides), cwd)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env |= {"CIFAR_CACHE_DIR": str(root / "cache"), "PYTHONPATH": str(REPO_ROOT)}
    found = {"cfg": cfg, "cwd": cwd, "env": env, "root": root}
    first = pipeline_runner(found, SubprocessHandler()).run()
    assert first.status == "Succeeded", first.failed_task
    assert first.tasks["serve-check"].state.value == "Succeeded"
    found["client"] = MlflowClient(tracking_uri=mlflow_server.uri)
    return found


def pipeline_runner(found: dict, handler: SubprocessHandler) -> LocalRunner:
    """A run of the fixture's config; after the first, the benchmark is refreshed (as
    --refresh benchmark): each run registers a version of its own, over the stage, train
    and optimize the first run left in the memo cache."""
    cfg = found["cfg"]
    return LocalRunner(
        build_submission(cfg).to_dict(),
        found["cwd"] / "runs",
        handler=handler,
        cwd=found["cwd"],
        env=found["env"],
        workflow_templates=[build_template(cfg).to_dict()],
        cache_dir=found["root"] / "cache",
        refresh=("benchmark",),
    )


def previous_serves(found: dict, runner: LocalRunner, version: str) -> str:
    """The previous champion's server, up and Ready before the run under the name deploy
    applies (the manifest deploy builds, started as the runner starts it): on the cluster
    the InferenceService outlives the workflow that deployed it. Its URL."""
    cfg = found["cfg"]
    manifest = build_inferenceservice(
        cfg, model_uri=f"models:/{TXN_MODEL}/{version}", labels={}, settings=config_args(cfg)
    )
    deadline = {"activeDeadlineSeconds": 120}
    spec, _ = service_process(
        manifest, deadline, found["cwd"], found["env"], runner.services.port_for
    )
    log = found["root"] / f"previous-v{version}.log"
    assert runner.services.apply(spec, "an earlier run", log, deque(), threading.Event()) == 0
    return spec.url


def run_over_previous(found: dict, late_s: float | None):
    """A run whose benchmark promotes a new version over the champion (its accuracy tag
    set to 0 first: any model wins), the champion's server up before it, the new
    version's server late. The handler, the result and the champion before."""
    client = found["client"]
    champion = client.get_model_version_by_alias(TXN_MODEL, "champion").version
    client.set_model_version_tag(TXN_MODEL, champion, "accuracy", "0.0")
    client.set_model_version_tag(TXN_MODEL, champion, "p50_ms", "1e9")
    handler = LateNewServer(champion, late_s)
    runner = pipeline_runner(found, handler)
    handler.url = previous_serves(found, runner, champion)
    result = runner.run()
    return handler, result, champion


def test_a_new_server_that_never_becomes_ready_leaves_the_previous_version_serving(
    transaction: dict,
) -> None:
    """Issue 30 item 7: deploy re-applies over the Ready previous version and succeeds at
    once (Argo reads the old Ready); serve-check waits serving.ready_timeout_s for the new
    version, gets no answer, moves the alias back and fails for good; rollback-apply puts
    the previous version back, and it serves when the run ends; the workflow Failed."""
    started = time.monotonic()
    handler, result, previous = run_over_previous(transaction, late_s=None)
    states = {name: task.state.value for name, task in result.tasks.items()}
    new = result.tasks["benchmark"].outputs["model-version"]
    assert result.tasks["benchmark"].outputs["promoted"] == "true"
    assert result.tasks["benchmark"].outputs["previous-version"] == previous
    assert handler.late == [f"models:/{TXN_MODEL}/{new}"]  # only the new one was late
    assert result.status == "Failed"
    assert states["deploy"] == "Succeeded"  # on the previous version's Ready
    assert states["serve-check"] == "Failed"
    assert result.tasks["serve-check"].attempts == 1  # its verdict is final
    assert states["rollback-apply"] == "Succeeded" and states["rollback-delete"] == "Skipped"
    assert states["rollback-alias"] == "Succeeded"
    check_log = (result.run_dir / "logs" / "serve-check.log").read_text()
    assert "unreachable: " in check_log and f"(waited {READY_TIMEOUT_S} s)" in check_log
    assert f"moved back from v{new} to v{previous}" in check_log
    client = transaction["client"]
    assert client.get_model_version_by_alias(TXN_MODEL, "champion").version == previous
    assert handler.served_at_end == [previous]  # the endpoint serves what the alias names
    assert "serving.rollback" in client.get_model_version(TXN_MODEL, new).tags
    # the run took the wait, not the deploy's deadline twice over
    assert time.monotonic() - started < 600


def test_a_new_server_ready_late_within_the_timeout_is_checked_and_kept(
    transaction: dict,
) -> None:
    """The new server answers only LATE_S after deploy succeeded (on the old Ready):
    serve-check waits for that version within serving.ready_timeout_s, checks it, and the
    run ends Succeeded with the alias and the served version the new one."""
    handler, result, previous = run_over_previous(transaction, late_s=LATE_S)
    states = {name: task.state.value for name, task in result.tasks.items()}
    new = result.tasks["benchmark"].outputs["model-version"]
    assert result.status == "Succeeded", result.failed_task
    assert handler.late == [f"models:/{TXN_MODEL}/{new}"]
    assert states["deploy"] == states["serve-check"] == "Succeeded"
    assert result.tasks["serve-check"].attempts == 1
    assert result.tasks["serve-check"].seconds >= LATE_S  # it waited for the version
    assert {states[r] for r in ("rollback-alias", "rollback-apply", "rollback-delete")} == {
        "Omitted"
    }
    client = transaction["client"]
    assert client.get_model_version_by_alias(TXN_MODEL, "champion").version == new != previous
    assert handler.served_at_end == [new]


# --- a run stopped by Ctrl-C (argo stop) restores the champion (issue 38 item 8) ---------

STOP_AFTER_S = 3  # into the stopped task: the deploy's wait, or the check's


class CtrlC(LateNewServer):
    """As ``LateNewServer`` with the new version's server never ready, and a Ctrl-C: SIGINT
    to this process (the runner's own handlers take it, flows/local/signals.py) once
    ``during`` (deploy or serve-check) has run ``STOP_AFTER_S``. Once the previous version's
    server is started again, what it serves is asked until it answers (``restored``)."""

    def __init__(self, previous: str, during: str) -> None:
        super().__init__(previous, late_s=None)
        self.during = during
        self.restored: list[str] | None = None
        self.watchers: list[threading.Thread] = []
        self.timers: list[threading.Timer] = []

    def _stop_soon(self) -> None:
        timer = threading.Timer(STOP_AFTER_S, os.kill, (os.getpid(), signal.SIGINT))
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def start_service(self, spec: ProcessSpec, sink):
        model = spec.argv[spec.argv.index("--model-uri") + 1]
        process = super().start_service(spec, sink)
        if model != f"models:/{TXN_MODEL}/{self.previous}":
            if self.during == "deploy":  # the deploy now waits for a server never ready
                self._stop_soon()
        else:
            watcher = threading.Thread(target=self._ask, args=(spec.url, process), daemon=True)
            watcher.start()
            self.watchers.append(watcher)
        return process

    def _ask(self, url: str, process) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S * 4
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(ServingError, OSError), ServingClient(url, 5) as client:
                self.restored = client.served_versions(TXN_MODEL)
                return
            time.sleep(0.2)

    def run(self, spec: ProcessSpec, log: Path, tail: deque[str]) -> int:
        if self.during == "serve-check" and "steps.serve_check" in spec.argv:
            self._stop_soon()
        if not self.url:  # no server before the run: nothing to ask at close-run
            return SubprocessHandler.run(self, spec, log, tail)
        return super().run(spec, log, tail)


@pytest.mark.parametrize("during", ["deploy", "serve-check"])
def test_ctrl_c_during_the_deployment_puts_the_champion_back(
    transaction: dict, during: str
) -> None:
    """Ctrl-C is ``argo stop``: the running task is stopped, the rollbacks after it never
    run (Argo v4.0.5 workflowpod.go createWorkflowPod: no pod but the exit handler's), and
    the exit handler's restore-champion moves the alias back from the version this run
    promoted to the first, and restore-apply serves the first again. During deploy the
    service was new (the previous version not up before the run); during serve-check the
    deploy had re-applied it over the previous version, which served."""
    assert threading.current_thread() is threading.main_thread()  # the runner's handlers
    found, client = transaction, transaction["client"]
    previous = client.get_model_version_by_alias(TXN_MODEL, "champion").version
    client.set_model_version_tag(TXN_MODEL, previous, "accuracy", "0.0")  # any model wins
    client.set_model_version_tag(TXN_MODEL, previous, "p50_ms", "1e9")
    handler = CtrlC(previous, during)
    runner = pipeline_runner(found, handler)
    if during == "serve-check":
        handler.url = previous_serves(found, runner, previous)
    try:
        with pytest.raises(RunStopped) as stopped:
            runner.run()
    finally:  # a Ctrl-C never outlives the run it was meant for
        for timer in handler.timers:
            timer.cancel()
    assert stopped.value.signum == signal.SIGINT
    assert len(handler.timers) == 1
    for watcher in handler.watchers:
        watcher.join(timeout=60)
    tasks = runner.tasks
    new = tasks["benchmark"].outputs["model-version"]
    assert tasks["benchmark"].outputs["promoted"] == "true" and new != previous
    assert tasks[during].state.value == "Failed" and tasks[during].message == STOP_MESSAGE
    assert not [n for n in ("rollback-alias", "rollback-apply") if n in tasks and tasks[n].attempts]
    exit_tasks = {n.split(".", 1)[1]: t for n, t in tasks.items() if n.startswith("onExit.")}
    assert exit_tasks["restore-champion"].state.value == "Succeeded"
    assert exit_tasks["restore-champion"].outputs == {
        "restore-service": "true",
        "previous-version": previous,
        # restore-apply serves it with the image that served it (the benchmark's tag)
        "previous-serving-image": client.get_model_version(TXN_MODEL, previous).tags[
            "serving_image"
        ],
    }
    assert exit_tasks["restore-apply"].state.value == "Succeeded"
    assert exit_tasks["restore-delete"].state.value == "Skipped"
    # the alias and the served version back on the first
    assert client.get_model_version_by_alias(TXN_MODEL, "champion").version == previous
    assert handler.restored == [previous]
    reason = client.get_model_version(TXN_MODEL, new).tags["serving.rollback"]
    assert "ended Failed before its live check passed" in reason
    run_id = runner.globals["workflow.outputs.parameters.mlflow-run-id"]
    assert client.get_run(run_id).info.status == "KILLED"  # close-run: stopped
