"""``spec.synchronization.mutexes`` between local runs, as Argo holds a workflow-level mutex
(argo-workflows v4.0.5 workflow/controller/operator.go ``operate``, workflow/sync): a run
started while another holds the lock waits Pending with Argo's message, then runs; both
end Succeeded, one after the other; a killed holder leaves no lock behind. Real runs:
each a ``run_local`` in its own process, as two ``python flows/cifar.py`` would be."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.local.errors import UnsupportedFeature
from flows.local.synchronization import mutex_names
from flows.local.workflow import LocalRunner
from tests.helpers.paths import REPO_ROOT

RUN = """
import json, sys
from pathlib import Path
from flows.local.run import run_local
manifest = json.loads(Path(sys.argv[1]).read_text())
raise SystemExit(run_local(manifest, runs_dir=Path(sys.argv[2])))
"""


def workflow(name: str, script: str, **spec) -> dict:
    """One task running ``script``, under the mutex ``m`` unless ``spec`` says otherwise."""
    spec.setdefault("synchronization", {"mutexes": [{"name": "m"}]})
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": [{"name": "a", "template": "t"}]}},
                {"name": "t", "container": {"image": "i:1", "command": ["sh", "-c", script]}},
            ],
            **spec,
        },
    }


def start(tmp_path: Path, manifest: dict) -> subprocess.Popen[str]:
    """A local run in a process of its own; locks in tmp_path/cache/locks."""
    path = tmp_path / f"{manifest['metadata']['name']}.json"
    path.write_text(json.dumps(manifest))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CIFAR_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.Popen(
        [sys.executable, "-c", RUN, str(path), str(tmp_path / "runs")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_second_run_waits_for_the_mutex_then_both_succeed(tmp_path: Path) -> None:
    def timed(name: str) -> str:  # the task's start and end, in seconds since the epoch
        out = tmp_path / name
        return f"date +%s.%N > {out}.start; sleep 1.5; date +%s.%N > {out}.end"

    first = start(tmp_path, workflow("first", timed("first")))
    wait_for(tmp_path / "first.start", first)
    second = start(tmp_path, workflow("second", timed("second")))
    (_, first_log), (_, second_log) = first.communicate(timeout=120), second.communicate(120)
    assert (first.returncode, second.returncode) == (0, 0), (first_log, second_log)
    waiting = "[second] workflow: Pending (Waiting for local/Mutex/m lock. Lock status: 0/1)"
    assert waiting in second_log and "Waiting for" not in first_log
    ended = float((tmp_path / "first.end").read_text())
    assert float((tmp_path / "second.start").read_text()) >= ended  # one after the other
    for name in ("first", "second"):
        state = json.loads((tmp_path / "runs" / name / "state.json").read_text())
        assert state["globals"]["workflow.status"] == "Succeeded"


def test_a_killed_run_leaves_no_lock_held(tmp_path: Path) -> None:
    pid_file = tmp_path / "task.pid"
    holder = start(tmp_path, workflow("holder", f"echo $$ > {pid_file}; exec sleep 60"))
    wait_for(pid_file, holder)
    holder.send_signal(signal.SIGKILL)  # no handler, no clean-up: only the kernel lets go
    holder.wait()
    try:
        after = start(tmp_path, workflow("after", "true"))
        _, log = after.communicate(timeout=60)
        assert after.returncode == 0, log
        assert "Waiting for" not in log
    finally:  # the killed runner's task, in a session of its own, outlived it
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_without_the_mutex_runs_do_not_wait(tmp_path: Path) -> None:
    """The lock is the mutex's: runs that name none take none. Each task waits (20 s at
    most) until the other one started, so both succeed only side by side."""

    def meets(me: str, other: str) -> str:
        wait = f"[ -e {tmp_path}/{other} ] && exit 0; sleep 0.05"
        return f"touch {tmp_path}/{me}; for i in $(seq 400); do {wait}; done; exit 1"

    runs = [
        start(tmp_path, workflow(me, meets(me, other), synchronization={}))
        for me, other in (("x", "y"), ("y", "x"))
    ]
    for run in runs:
        _, log = run.communicate(timeout=60)
        assert run.returncode == 0, log


@pytest.mark.parametrize(
    ("synchronization", "words"),
    [
        ({"semaphores": [{"configMapKeyRef": {"name": "c", "key": "k"}}]}, "semaphores"),
        ({"mutexes": [{"name": "m", "database": True}]}, "mutexes[]: database"),
        ({"mutexes": [{"namespace": "n"}]}, "a mutex without a name"),
    ],
    ids=["semaphore", "database-mutex", "no-name"],
)
def test_what_a_lock_here_cannot_be_is_refused_by_name(
    tmp_path: Path, synchronization: dict, words: str
) -> None:
    manifest = workflow("w", "true", synchronization=synchronization)
    with pytest.raises(UnsupportedFeature, match=r"spec\.synchronization"):
        LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "cache")
    with pytest.raises(UnsupportedFeature, match=re.escape(words)):
        LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "cache")


def test_lock_names_are_argos() -> None:
    spec = {"synchronization": {"mutexes": [{"name": "b"}, {"name": "a", "namespace": "ns"}]}}
    assert mutex_names(spec, "argo") == ["argo/Mutex/b", "ns/Mutex/a"]
    assert mutex_names({}, "argo") == []
