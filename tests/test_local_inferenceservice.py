"""A KServe InferenceService (``serving.kserve.io/v1beta1``, KServe v0.19.0) resource
template run locally (issue #22): its predictor's first container as a real process on a
free 127.0.0.1 port, Ready when its readinessProbe path answers 200, up for the rest of the
workflow and gone when the run ends; a re-apply replaces it, a delete stops it. The
servers here are small real HTTP servers written to tmp_path, not the model server."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from flows.local.view import print_summary
from flows.local.workflow import LocalRunner
from tests.helpers.local_examples import run, states
from tests.helpers.local_isvc import (
    RESOURCE,
    assert_gone,
    curl,
    deploy,
    isvc,
    port_of,
    served,
    task,
    workflow,
)


def test_the_service_is_up_for_later_tasks_and_gone_after_the_run(tmp_path: Path) -> None:
    manifest = workflow(
        [deploy("deploy", isvc(tmp_path, "slow", "answer-42")), curl()],
        [task("deploy", "deploy"), task("check", "check", "deploy", url_of="deploy")],
    )
    runner, result = run(tmp_path, manifest)
    assert states(result) == {"deploy": "Succeeded", "check": "Succeeded"}, runner.tasks
    outputs = result.tasks["deploy"].outputs
    port = port_of(outputs["url"])
    assert outputs["url"] == outputs["external-url"] == f"http://127.0.0.1:{port}"
    assert outputs["name"] == "clf"
    assert result.tasks["check"].result == "answer-42"  # curl reached it at that URL
    service = served(runner)["clf"]
    assert (service["url"], service["state"]) == (outputs["url"], "Stopped")
    assert service["task"] == "deploy"
    state = yaml.safe_load((result.run_dir / "state.json").read_text())
    assert state["services"]["clf"]["url"] == outputs["url"]
    console = Console(file=io.StringIO(), width=300)
    print_summary(result, runner, console)
    assert (
        f"InferenceService clf: {outputs['url']} (task deploy, Stopped" in console.file.getvalue()
    )
    log = (result.run_dir / "logs" / "deploy.log").read_text()
    assert f"serving answer-42 on http://127.0.0.1:{port}" in log  # --host/--port rewritten
    assert_gone([service["pid"]], [port])


NEVER = r"not ready after 2 s \(GET /v2/health/ready on http://127\.0\.0\.1:\d+ never answered"
EXITS = r"the server exited with code 3 before GET /v2/health/ready"


@pytest.mark.parametrize(
    ("mode", "deadline", "message"),
    [
        pytest.param("never", 2, NEVER + r" 200\); stopped", id="never-ready"),
        pytest.param("exit", None, EXITS, id="exits"),
    ],
)
def test_a_server_that_is_not_ready_fails_the_node_and_is_stopped(
    tmp_path: Path, mode: str, deadline: float | None, message: str
) -> None:
    manifest = workflow(
        [deploy("deploy", isvc(tmp_path, mode, "3"), deadline), curl()],
        [task("deploy", "deploy"), task("check", "check", "deploy", url_of="deploy")],
    )
    runner, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert states(result) == {"deploy": "Failed", "check": "Omitted"}
    record = result.tasks["deploy"]
    assert "\n" not in record.message
    assert re.search(message, record.message), record.message
    assert record.exit_code == (3 if mode == "exit" else None)
    service = served(runner)["clf"]
    assert service["state"] == "Stopped"
    assert_gone([service["pid"]], [port_of(service["url"])])


PROBE = """
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=5)
    print("answered")
except OSError:
    print("refused")
"""


def test_a_second_apply_replaces_the_process_and_a_delete_stops_it(tmp_path: Path) -> None:
    """A rollback re-applies the same name with another model: the old process stopped,
    the new one at the same URL (as the cluster's Service keeps its address), so a task
    given the deploy's URL reaches the new model once it is up (the re-apply over a Ready
    service succeeds at once, as Argo reads the old Ready: the task waits for an answer,
    as serve-check waits for the version). Then a delete by flags (run as
    ``kubectl delete --ignore-not-found``: argo-workflows v4.0.5
    workflow/executor/resource.go getKubectlArguments) stops it during the run, and a
    second delete finds nothing and succeeds."""
    delete = {"name": "delete", "resource": {"action": "delete", "flags": [RESOURCE, "clf"]}}
    probe = {
        "name": "probe",
        "inputs": {"parameters": [{"name": "url"}]},
        "container": {"image": "python:3", "command": ["python", "-c", PROBE]},
    }
    probe["container"]["args"] = ["{{inputs.parameters.url}}/value"]
    templates = [
        deploy("deploy", isvc(tmp_path, "ok", "v1")),
        deploy("rollback", isvc(tmp_path, "ok", "v0")),
        curl(),
        curl("check-waiting", wait=True),
        delete,
        probe,
    ]
    tasks = [
        task("deploy", "deploy"),
        task("first", "check", "deploy", url_of="deploy"),
        task("rollback", "rollback", "first"),
        task("second", "check-waiting", "rollback", url_of="deploy"),
        task("delete", "delete", "second"),
        task("deleted", "probe", "delete", url_of="deploy"),
        task("again", "delete", "deleted"),
    ]
    runner, result = run(tmp_path, workflow(templates, tasks))
    assert result.status == "Succeeded", {n: r.message for n, r in result.tasks.items()}
    url = result.tasks["deploy"].outputs["url"]
    assert result.tasks["rollback"].outputs["url"] == url
    assert result.tasks["first"].result == "v1"
    assert result.tasks["second"].result == "v0"  # the new process answers at that URL
    assert result.tasks["deleted"].result == "refused"  # nothing there after the delete
    log = (result.run_dir / "logs" / "deploy.log").read_text()
    assert "--- InferenceService clf stopped" in log  # replaced by the rollback's apply
    first_pid = int(re.search(r"pid (\d+)", log).group(1))
    assert first_pid != served(runner)["clf"]["pid"]
    assert any("stopped its process" in line for line in result.tasks["delete"].tail)
    assert any("nothing to delete" in line for line in result.tasks["again"].tail)
    assert_gone([first_pid, served(runner)["clf"]["pid"]], [port_of(url)])


def test_a_re_apply_over_a_ready_service_succeeds_at_once(tmp_path: Path) -> None:
    """A new version applied over a Ready service: the node succeeds as Argo's first GET
    would decide it, on the previous version's Ready (argo-workflows v4.0.5
    workflow/executor/resource.go WaitResource polls immediately), while the new server,
    ready only after 3 s, rolls out behind it; a task waiting at the URL gets the new one."""
    templates = [
        deploy("deploy", isvc(tmp_path, "ok", "v1")),
        deploy("update", isvc(tmp_path, "slow", "v2", ready_after_s=3)),
        curl("check-waiting", wait=True),
    ]
    tasks = [
        task("deploy", "deploy"),
        task("update", "update", "deploy"),
        task("check", "check-waiting", "update", url_of="update"),
    ]
    runner, result = run(tmp_path, workflow(templates, tasks))
    assert states(result) == dict.fromkeys(["deploy", "update", "check"], "Succeeded")
    update = result.tasks["update"]
    assert update.seconds < 3, update.seconds  # not the new server's 3 s
    assert any("re-applied over a Ready service" in line for line in update.tail)
    assert result.tasks["check"].result == "v2"
    assert update.outputs["url"] == result.tasks["deploy"].outputs["url"]
    log = (result.run_dir / "logs" / "update.log").read_text()
    assert f"--- InferenceService clf ready at {update.outputs['url']}" in log
    service = served(runner)["clf"]
    assert (service["task"], service["state"]) == ("update", "Stopped")
    assert_gone([service["pid"]], [port_of(service["url"])])


def test_a_rollback_over_a_server_that_never_became_ready_waits_for_it(tmp_path: Path) -> None:
    """The new version never becomes ready (its node succeeded on the old Ready); the
    rollback's apply finds no Ready service, so, as Argo would read no Ready until the
    rollback's pods are, it waits for the previous version's server: a plain check right
    after it gets the previous version."""
    templates = [
        deploy("deploy", isvc(tmp_path, "ok", "v1")),
        deploy("update", isvc(tmp_path, "never", "v2")),
        deploy("rollback", isvc(tmp_path, "slow", "v1", ready_after_s=1)),
        curl(),
    ]
    tasks = [
        task("deploy", "deploy"),
        task("update", "update", "deploy"),
        task("rollback", "rollback", "update"),
        task("check", "check", "rollback", url_of="deploy"),
    ]
    runner, result = run(tmp_path, workflow(templates, tasks))
    assert states(result) == dict.fromkeys(["deploy", "update", "rollback", "check"], "Succeeded")
    rollback = result.tasks["rollback"]
    assert rollback.seconds >= 1
    assert not any("re-applied over a Ready service" in line for line in rollback.tail)
    assert any("InferenceService clf ready at" in line for line in rollback.tail)
    assert result.tasks["check"].result == "v1"
    service = served(runner)["clf"]
    assert_gone([service["pid"]], [port_of(service["url"])])


def test_the_manifest_from_a_raw_artifact_runs_too(tmp_path: Path) -> None:
    """A WorkflowTemplate's deploy carries its manifest as a raw input artifact with the
    run's parameters in it (as flows/pipeline/train_templates.py does for the job)."""
    text = isvc(tmp_path, "ok", "{{inputs.parameters.model}}")
    template = deploy("deploy", "")
    del template["resource"]["manifest"]
    template["resource"]["manifestFrom"] = {"artifact": {"name": "manifest"}}
    raw = {"name": "manifest", "path": "/tmp/manifest.yaml", "raw": {"data": text}}
    template["inputs"] = {"parameters": [{"name": "model"}], "artifacts": [raw]}
    deploying = task("deploy", "deploy")
    deploying["arguments"] = {"parameters": [{"name": "model", "value": "from-artifact"}]}
    manifest = workflow(
        [template, curl()], [deploying, task("check", "check", "deploy", url_of="deploy")]
    )
    runner, result = run(tmp_path, manifest)
    assert states(result) == {"deploy": "Succeeded", "check": "Succeeded"}
    assert result.tasks["check"].result == "from-artifact"
    service = served(runner)["clf"]
    assert_gone([service["pid"]], [port_of(service["url"])])


FAIL_ONCE = """
import pathlib, sys
flag = pathlib.Path(sys.argv[1])
ok = flag.exists()
flag.touch()
sys.exit(0 if ok else 1)
"""


def test_a_resumed_run_deploys_again(tmp_path: Path) -> None:
    """The earlier runner's process died with it, so --resume runs the deploy again (the
    later tasks reach a live service) while other succeeded tasks are kept."""
    flaky = {"name": "flaky", "container": {"image": "i", "command": [sys.executable, "-c"]}}
    flaky["container"]["args"] = [FAIL_ONCE, str(tmp_path / "second-time")]
    manifest = workflow(
        [deploy("deploy", isvc(tmp_path, "ok", "v1")), curl(), flaky],
        [
            task("deploy", "deploy"),
            task("flaky", "flaky", "deploy"),
            task("check", "check", "flaky", url_of="deploy"),
        ],
    )
    first, result = run(tmp_path, manifest)
    assert states(result) == {"deploy": "Succeeded", "flaky": "Failed", "check": "Omitted"}
    old = served(first)["clf"]
    resumed = LocalRunner.resume(result.run_dir, cache_dir=tmp_path / "cache", cwd=tmp_path)
    assert "deploy" not in resumed.state.kept
    again = resumed.run()
    assert states(again) == {"deploy": "Succeeded", "flaky": "Succeeded", "check": "Succeeded"}
    assert again.tasks["check"].result == "v1"
    new = served(resumed)["clf"]
    assert new["pid"] != old["pid"]
    assert_gone([old["pid"], new["pid"]], [port_of(new["url"])])
