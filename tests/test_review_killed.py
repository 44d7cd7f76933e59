"""A local run whose runner was killed (SIGKILL, a lost terminal's machine) before it could
record an end: ``list``, ``get`` and ``logs -f`` show it Failed and its unfinished nodes
Error, as Argo's controller errs the nodes of pods that vanished, instead of Running for
ever (issue 41's closing note left it Running)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from flows.local.review.argo_workflow import runner_gone, workflow_status
from flows.local.review.logs import print_logs
from flows.local.review.runs import load_state
from tests.helpers.paths import REPO_ROOT
from tests.helpers.review_helpers import cli

RUNNER = """
import sys
from pathlib import Path
from flows.local.workflow import LocalRunner
manifest = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "killed"},
    "spec": {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "a", "template": "t"}]}},
        {"name": "t", "container": {"image": "i:1",
                                    "command": ["sh", "-c", "echo started; sleep 120"]}},
    ]},
}
root = Path(sys.argv[1])
LocalRunner(manifest, root / "runs", cache_dir=root / "cache", cwd=root).run()
"""


def test_a_run_whose_runner_was_killed_reads_failed(tmp_path: Path, capsys) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path)], env=env, start_new_session=True
    )
    run_dir = tmp_path / "runs" / "killed"
    try:
        deadline = time.monotonic() + 120
        # the task's own line, not the runner's "--- attempt 1: ... echo started" before it
        while "started" not in _text(run_dir / "logs" / "a.log").splitlines():
            assert time.monotonic() < deadline and runner.poll() is None, "the run never started"
            time.sleep(0.1)
        assert workflow_status(load_state(run_dir))["status"]["phase"] == "Running"
        os.killpg(runner.pid, signal.SIGKILL)  # the runner and its task: nothing records an end
        runner.wait(timeout=30)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
    state = load_state(run_dir)
    assert state["globals"].get("workflow.status", "Running") == "Running"  # as it was left
    workflow = workflow_status(state)
    message = f"the local runner (pid {runner.pid}) ended before the run did"
    assert workflow["status"]["phase"] == "Failed"
    assert workflow["status"]["message"].startswith(message)
    assert workflow["status"]["finishedAt"]
    nodes = {n["displayName"]: n for n in workflow["status"]["nodes"].values()}
    assert nodes["a"]["phase"] == "Error" and nodes["a"]["message"].startswith(message)
    out = cli(capsys, "list", "--runs-dir", str(tmp_path / "runs"))[1]
    assert out.splitlines()[1].split()[:2] == ["killed", "Failed"], out
    assert cli(capsys, "list", "--running", "--runs-dir", str(tmp_path / "runs"))[1] == (
        "No workflows found\n"
    )
    seen: list[str] = []
    print_logs(run_dir, follow=True, poll_s=0.1, write=seen.append)  # returns: it ended
    assert seen == ["a: --- attempt 1: sh -c echo started; sleep 120", "a: started"]
    assert json.loads(cli(capsys, "get", str(run_dir), "-o", "json")[1])["status"]["phase"] == (
        "Failed"
    )


def test_only_the_process_that_wrote_the_state_is_its_runner() -> None:
    here = {"host": socket.gethostname(), "pid": os.getpid()}
    here["created"] = psutil.Process().create_time()
    assert runner_gone({"runner": here}) is None  # this very process
    # the same pid started at another time: the pid was taken again by another process
    assert runner_gone({"runner": {**here, "created": here["created"] - 60}}) is not None
    # another machine's runner (a shared runs/ folder): nothing here tells
    assert runner_gone({"runner": {**here, "host": "elsewhere", "pid": 1 << 22}}) is None
    assert runner_gone({}) is None  # a state.json of before the field


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""
