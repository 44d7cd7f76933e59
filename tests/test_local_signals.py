"""A local run stopped by SIGINT, SIGTERM or SIGHUP ends as ``argo stop`` ends a workflow
(issue #18): every task process gone, the exit handler run with {{workflow.status}} =
Failed, the running task Failed in state.json, exit 130 / 143 / 129, and --resume finishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.pipeline_runs import SMALL_AFTER_TRAIN, sets, state_of

STOPPED = "Stopped with strategy 'Stop'"
SCRIPT = r"""
import sys
from pathlib import Path
from hera.workflows import DAG, Container, Workflow
from flows.local.run import run_local
tmp = Path(sys.argv[1])
with Workflow(name="stopped", entrypoint="main", on_exit="finally") as w:
    failures = "cat > %(tmp)s/failures <<'END'\n{{workflow.failures}}\nEND\n"
    report = failures + "echo {{workflow.status}} > %(tmp)s/status"
    Container(name="finally", image="i:1", command=["sh", "-c", report + "; %(exit_sleep)s"])
    # the first run sleeps (a child of sh, a grandchild of the runner); --resume finishes
    slow = "[ -e %(tmp)s/pid ] && exit 0; echo $$ > %(tmp)s/pid; "
    slow += "sleep 60 & echo $! > %(tmp)s/child; wait"
    slow_t = Container(name="slow", image="i:1", command=["sh", "-c", slow])
    quick_t = Container(name="quick", image="i:1", command=["true"])
    with DAG(name="main"):
        quick_t(name="quick") >> slow_t(name="slow")
resume = Path(sys.argv[2]) if len(sys.argv) > 2 else None
sys.exit(run_local(w, resume=resume, runs_dir=tmp / "runs", cache_dir=tmp / "cache"))
"""


def _script(tmp_path: Path, exit_sleep: str = "true") -> str:
    return textwrap.dedent(SCRIPT) % {"tmp": tmp_path, "exit_sleep": exit_sleep}


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]
        time.sleep(0.05)
    assert path.exists(), path


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie not yet reaped by init counts as gone
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def _start(script: str, tmp_path: Path, ignore_sigint: bool) -> subprocess.Popen:
    # SIG_IGN for SIGINT is what a background job of a script inherits: the runner must
    # install its own handler regardless.
    def preexec() -> None:
        if ignore_sigint:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=REPO_ROOT,
        env=env,
        preexec_fn=preexec,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
)
def test_a_signal_stops_the_run_as_argo_stop_and_resume_finishes(
    tmp_path: Path, signum: int, code: int
) -> None:
    script = _script(tmp_path)
    process = _start(script, tmp_path, ignore_sigint=signum == signal.SIGINT)
    _wait_for(tmp_path / "child", process)
    pids = [int((tmp_path / n).read_text()) for n in ("pid", "child")]
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert f"Stopped by {signal.Signals(signum).name}" in err
    assert all(_gone(pid) for pid in pids), pids  # sh and its sleep: nothing outlives the run
    assert (tmp_path / "status").read_text().strip() == "Failed"  # as `argo stop`
    failures = json.loads(json.loads((tmp_path / "failures").read_text()))  # Argo quotes it
    assert [(f["displayName"], f["message"]) for f in failures] == [("slow", STOPPED)]
    state = state_of(tmp_path / "runs" / "stopped")
    assert state["tasks"]["quick"]["state"] == "Succeeded"
    assert state["tasks"]["slow"]["state"] == "Failed"
    assert state["tasks"]["slow"]["message"] == STOPPED
    assert state["exit_handler"]["state"] == "Succeeded"

    resumed = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), str(tmp_path / "runs" / "stopped")],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    state = state_of(tmp_path / "runs" / "stopped")
    assert state["tasks"]["slow"]["state"] == "Succeeded"
    assert (tmp_path / "status").read_text().strip() == "Succeeded"


def test_a_second_signal_ends_the_exit_handler_at_once(tmp_path: Path) -> None:
    script = _script(tmp_path, exit_sleep=f"echo $$ > {tmp_path}/exit-pid; sleep 60")
    process = _start(script, tmp_path, ignore_sigint=False)
    _wait_for(tmp_path / "child", process)
    process.send_signal(signal.SIGTERM)
    _wait_for(tmp_path / "exit-pid", process)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert time.monotonic() - started < 15
    assert process.returncode == 143, err  # the first signal's code
    assert "SIGINT while the exit handler ran: stopped it at once" in err
    assert _gone(int((tmp_path / "exit-pid").read_text()))
    state = state_of(tmp_path / "runs" / "stopped")
    assert state["exit_handler"]["state"] == "Failed"
    assert "second signal" in state["exit_handler"]["message"]


def test_previous_signal_handlers_are_restored(tmp_path: Path) -> None:
    from flows.local.workflow import LocalRunner

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    manifest = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "quick"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": [{"name": "a", "template": "t"}]}},
                {"name": "t", "container": {"image": "i", "command": ["true"]}},
            ],
        },
    }
    result = LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "cache").run()
    assert result.status == "Succeeded"
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.parametrize(
    ("failures", "stopped"),
    [
        (json.dumps([{"displayName": "train", "message": STOPPED}]), True),
        (json.dumps([{"displayName": "train", "message": "exit code 1"}]), False),
        # As Argo v4.0.5 hands it over (operator.go: json.Marshal, then strconv.Quote),
        # which the plain reading took for a string and failed on.
        (json.dumps(json.dumps([{"displayName": "train", "message": STOPPED}])), True),
        (json.dumps(json.dumps([{"displayName": "train", "message": "exit code 1"}])), False),
        ('"null"', False),
        ('"[1, 2]"', False),
        ("null", False),
        ("", False),
        ("not json", False),
    ],
)
def test_close_run_reads_a_stop_from_workflow_failures(failures: str, stopped: bool) -> None:
    from steps.tracking import was_stopped

    assert was_stopped(failures) is stopped


@pytest.mark.slow
def test_sigterm_during_train_of_the_smoke_pipeline(pipeline) -> None:
    """The real pipeline: torchrun and both ranks gone, the MLflow run KILLED, resumable.
    The smoke config's training (its accuracy is asserted), the rest made small
    (SMALL_AFTER_TRAIN) and nothing served: this test is about stopping and resuming."""
    from flows.local.pods.processes import descendants

    env, cwd, mlflow = pipeline.env, pipeline.cwd, pipeline.mlflow
    args = [*pipeline.args, *sets([*SMALL_AFTER_TRAIN, "serving.enabled=false"])]
    process = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "flows" / "cifar.py"), *args],
        cwd=cwd,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    state_file = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        found = list((cwd / "runs").glob("*/state.json")) if (cwd / "runs").exists() else []
        if found:
            state_file = found[0]
            if len([p for p in descendants(process.pid) if _is_rank(p)]) >= 2:
                break
        time.sleep(0.1)
    else:
        pytest.fail("train never ran with 2 ranks")
    everything = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err[-3000:]
    assert all(_gone(pid) for pid in everything), [p for p in everything if not _gone(p)]
    run_dir = state_file.parent
    state = state_of(run_dir)
    assert state["tasks"]["train"]["state"] == "Failed"
    assert state["tasks"]["train"]["message"] == STOPPED
    assert state["exit_handler"]["state"] == "Succeeded"
    run_id = state["globals"]["workflow.outputs.parameters.mlflow-run-id"]
    assert mlflow.get_run(run_id).info.status == "KILLED"
    assert mlflow.get_run(run_id).data.tags["argo.status"] == "Failed"

    resumed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "flows" / "cifar.py"), "--resume", str(run_dir)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    finished = state_of(run_dir)
    assert finished["tasks"]["benchmark"]["state"] == "Succeeded"
    # The smoke config's model clearly learned (chance is 0.1), resumed mid-training or not.
    assert float(finished["tasks"]["train"]["outputs"]["test_accuracy"]) >= 0.9
    assert mlflow.get_run(run_id).info.status == "FINISHED"


def _is_rank(pid: int) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return b"LOCAL_RANK=" in environ and b"TORCHELASTIC_RUN_ID=" in environ


SERVER = """
import http.server, os, subprocess, sys
port = int(os.environ["PORT"])
# a child in a session of its own: only the runner's walk of descendants can stop it
child = subprocess.Popen(["sleep", "120"], start_new_session=True)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", port), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid} {port}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
"""
SERVING_SCRIPT = r"""
import json, sys
from pathlib import Path
from flows.local.run import run_local
tmp = Path(sys.argv[1])
manifest = json.loads((tmp / "workflow.json").read_text())
sys.exit(run_local(manifest, runs_dir=tmp / "runs", cache_dir=tmp / "cache"))
"""


def serving_workflow(tmp_path: Path) -> dict:
    """deploy (an InferenceService whose server starts a child) >> a task that waits."""
    (tmp_path / "server.py").write_text(SERVER)
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "clf"},
        "spec": {
            "predictor": {
                "containers": [
                    {
                        "name": "kserve-container",
                        "image": "cifar-serve:1",
                        "command": ["python", str(tmp_path / "server.py"), str(tmp_path / "srv")],
                        "readinessProbe": {"httpGet": {"path": "/v2/health/ready"}},
                    }
                ]
            }
        },
    }
    wait = f"touch {tmp_path}/waiting; sleep 120"
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "serving"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {"name": "deploy", "template": "deploy"},
                            {"name": "wait", "template": "wait", "depends": "deploy"},
                        ]
                    },
                },
                {"name": "deploy", "resource": {"action": "apply", "manifest": json.dumps(isvc)}},
                {"name": "wait", "container": {"image": "i", "command": ["sh", "-c", wait]}},
            ],
        },
    }


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
)
def test_a_signal_stops_the_runs_inferenceservice(tmp_path: Path, signum: int, code: int) -> None:
    """Issue #22: the run's local InferenceService (and its server's own children) is gone
    after a stop by signal, and nothing listens on its port."""
    import psutil

    (tmp_path / "workflow.json").write_text(json.dumps(serving_workflow(tmp_path)))
    process = _start(textwrap.dedent(SERVING_SCRIPT), tmp_path, ignore_sigint=False)
    _wait_for(tmp_path / "waiting", process)
    server, child, port = (int(x) for x in (tmp_path / "srv").read_text().split())
    assert psutil.Process(server).is_running() and psutil.Process(child).is_running()
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert _gone(server) and _gone(child), (server, child)
    assert not [
        c
        for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == "LISTEN"
    ]
    state = state_of(tmp_path / "runs" / "serving")
    assert state["tasks"]["deploy"]["state"] == "Succeeded"
    assert state["tasks"]["wait"]["message"] == STOPPED
    assert state["services"]["clf"]["state"] == "Stopped"
    assert state["services"]["clf"]["url"] == f"http://127.0.0.1:{port}"
