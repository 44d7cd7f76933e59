"""``python flows/cifar.py`` end to end on this machine: the smoke config with 2 DDP
processes, against a real SeaweedFS S3 server and a real ``mlflow server``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from tests.cifar_files import write_cifar_tarball
from tests.conftest import REPO_ROOT, S3Bucket
from tests.mlflow_server import MLflowServer

pytestmark = pytest.mark.slow
STEPS = ["create-run", "stage", "train", "optimize", "benchmark"]


def cifar(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "flows" / "cifar.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def state_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "state.json").read_text())


def only_run_dir(cwd: Path, exclude: set[Path] = frozenset()) -> Path:
    dirs = [p for p in (cwd / "runs").iterdir() if p not in exclude]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.fixture
def pipeline(s3_bucket: S3Bucket, mlflow_server: MLflowServer, tmp_path: Path):
    env = {**os.environ, "CIFAR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    args = ["--config", str(REPO_ROOT / "configs" / "smoke.yaml")]
    args += ["--set", f"storage.root_uri={s3_bucket.uri}/pipeline"]
    args += ["--set", f"storage.endpoint_url={s3_bucket.server.endpoint}"]
    args += ["--set", f"tracking.uri={mlflow_server.uri}"]
    cwd = tmp_path / "work"
    cwd.mkdir()
    return args, env, cwd, MlflowClient(tracking_uri=mlflow_server.uri)


def test_failed_step_then_resume_then_a_memoized_second_run(pipeline, tmp_path: Path) -> None:
    args, env, cwd, mlflow = pipeline
    s3_root = next(a.split("=", 1)[1] for a in args if a.startswith("storage.root_uri="))
    tarball = tmp_path / "upload" / "cifar-10-python.tar.gz"
    args += ["--set", f"data.source={tarball}", "--set", "data.md5=none"]

    # 1. The upload is not complete yet (half the tarball): staging fails, the run says which
    # task and why. (A tarball that is not there at all is refused before anything runs.)
    tarball.parent.mkdir()
    write_cifar_tarball(tarball, per_batch=60, seed=3)
    whole = tarball.read_bytes()
    tarball.write_bytes(whole[: len(whole) // 2])
    failed = cifar(args, cwd, env)
    assert failed.returncode == 1, failed.stderr
    run_dir = only_run_dir(cwd)
    state = state_of(run_dir)
    assert state["tasks"]["stage"]["state"] == "Failed"
    assert state["tasks"]["train"]["state"] == "Omitted"
    assert "task stage failed" in failed.stderr
    assert "truncated or not a gzip tarball" in failed.stderr  # the step's own line, from its log
    run_id = state["globals"]["workflow.outputs.parameters.mlflow-run-id"]
    assert mlflow.get_run(run_id).info.status == "FAILED"
    # the exit handler's delete of the training job runs only when training itself did
    # not succeed (issue 30): here it never ran, so there is no job to delete
    assert state["exit_handler"]["state"] == "Succeeded"
    assert state["tasks"]["onExit.delete-train-job"]["state"] == "Skipped"
    # a fault, not a user error (exit 1): --resume is offered, with this interpreter
    resume = f"{sys.executable} {REPO_ROOT / 'flows' / 'cifar.py'} --resume runs/{run_dir.name}"
    assert f"Continue after a fix with: {resume}\n" in failed.stderr

    # 2. Finish the upload and resume, as printed, from a shell without the venv on PATH: the
    # MLflow run is kept, staging and the rest run.
    tarball.write_bytes(whole)
    resumed = subprocess.run(
        ["/bin/sh", "-c", resume],
        cwd=cwd,
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # what to do next names the config the run started with, not the default one
    assert f"serve --config {REPO_ROOT / 'configs' / 'smoke.yaml'} --set " in resumed.stderr
    for log in (run_dir / "logs").iterdir():
        assert "\x1b" not in log.read_text(errors="replace"), log  # no colour codes
    state = state_of(run_dir)
    assert {t: state["tasks"][t]["state"] for t in STEPS} == dict.fromkeys(STEPS, "Succeeded")
    assert state["tasks"]["create-run"]["message"] == "kept from the earlier run"
    assert state["tasks"]["optimize"]["outputs"]["optimized"].startswith(s3_root)
    assert float(state["tasks"]["train"]["outputs"]["test_accuracy"]) >= 0.0
    assert state["tasks"]["create-run"]["attempts"] == 1
    run = mlflow.get_run(run_id)
    assert run.info.status == "FINISHED"
    params, metrics = run.data.params, run.data.metrics
    assert params["train.model"] == "simplecnn" and params["train.nproc_per_node"] == "2"
    assert any(k.startswith("train") or "loss" in k for k in metrics), sorted(metrics)
    assert any(k.startswith("bench/") for k in metrics), sorted(metrics)
    assert any("optimize" in k or "parity" in k for k in metrics), sorted(metrics)
    assert (run_dir / "artifacts" / "benchmark" / "report.md").is_file()
    assert f"mlflow-run-url: {mlflow.tracking_uri}/#/experiments/" in resumed.stderr
    # The first champion: deployed as a local server, checked live, stopped at the end.
    assert state["tasks"]["benchmark"]["outputs"]["promoted"] == "true"
    assert state["tasks"]["deploy"]["state"] == "Succeeded"
    assert state["tasks"]["serve-check"]["state"] == "Succeeded"
    assert state["tasks"]["serve-check"]["outputs"]["passed"] == "true"
    (service,) = state["services"].values()
    assert service["state"] == "Stopped" and service["url"].startswith("http://127.0.0.1:")
    assert not psutil.pid_exists(service["pid"])
    port = int(service["url"].rsplit(":", 1)[1])
    assert all(c.laddr.port != port for c in psutil.net_connections() if c.status == "LISTEN")
    served = float(state["tasks"]["serve-check"]["outputs"]["accuracy"])  # 6 digits
    assert metrics["serving/accuracy"] == pytest.approx(served, abs=1e-6)
    assert run.data.tags["serving.url"] == service["url"]
    note = run.data.tags["mlflow.note.content"]
    assert re.search(r"\*\*Registry\*\* promoted: v\d+ \((first champion|accuracy)", note), note
    assert f"**Stopped** `{service['url']}` was this local run's server" in note
    # Each step reports its work and its start-up (benchmarks/local_overhead.py reads both).
    assert state["exit_handler"]["state"] == "Succeeded"
    assert state["tasks"]["onExit.delete-train-job"]["state"] == "Skipped"  # it Succeeded
    for task in ("create-run", "stage", "train", "optimize", "benchmark", "onExit.close-run"):
        found = sorted((run_dir / "tasks" / task).glob("outputs/**/summary.json"))
        summary = json.loads(found[0].read_text())
        assert summary["seconds"] > 0 and summary["startup_seconds"] > 0.05, (task, summary)

    # 3. The same config again: a new workflow, staging served from the memo cache.
    second = cifar(args, cwd, env)
    assert second.returncode == 0, second.stderr[-3000:]
    second_dir = only_run_dir(cwd, exclude={run_dir})
    state = state_of(second_dir)
    assert state["tasks"]["stage"]["state"] == "Cached"
    assert "memoized" in second.stderr
    assert all(state["tasks"][t]["state"] == "Succeeded" for t in STEPS if t != "stage")
    # deploy and serve-check follow the benchmark's decision: Skipped when the alias stayed
    promoted = state["tasks"]["benchmark"]["outputs"]["promoted"] == "true"
    expected = "Succeeded" if promoted else "Skipped"
    assert {t: state["tasks"][t]["state"] for t in ("deploy", "serve-check")} == dict.fromkeys(
        ("deploy", "serve-check"), expected
    )
    new_run = state["globals"]["workflow.outputs.parameters.mlflow-run-id"]
    assert new_run != run_id and mlflow.get_run(new_run).info.status == "FINISHED"
