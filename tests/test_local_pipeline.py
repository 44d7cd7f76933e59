"""``python flows/cifar.py`` end to end on this machine: the smoke config made small (one
epoch on 2 DDP processes, one optimize variant, one batch size: tests/pipeline_runs.py's
SMALL, as nothing here asserts the model's accuracy or the variants' numbers; the README's
smoke run itself is test_first_hour.py's), against a real SeaweedFS S3 server and a real
``mlflow server``.

One run, shared by the tests below, which only read it: staging fails on a tarball whose
upload is not complete yet, the run is resumed as printed once the upload is whole, and it
ends with the first champion deployed, checked live and stopped. Then the same data source
again: a second workflow whose staging is served from the memo cache. One extra optimize
variant's builder segfaults (``optimize.extra_variants``, tests/faulty_builders.py): the
run still ends Succeeded, that variant recorded as crashed (issue 42)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.cifar_files import write_cifar_tarball
from tests.conftest import REPO_ROOT, S3Bucket, pipeline_in
from tests.faulty_builders import extra
from tests.mlflow_server import MLflowServer
from tests.pipeline_runs import SMALL, cifar, only_run_dir, sets, state_of
from tests.servers import SeaweedFS

pytestmark = pytest.mark.slow
STEPS = ["create-run", "stage", "train", "optimize", "benchmark"]
# A variant whose builder crashes its build process (SIGSEGV), optional: the step goes on.
CRASHING = [
    f"optimize.extra_variants=[{extra('segv', 'segfault')}]",
    'optimize.optional_variants=["segv"]',
]


@dataclass(frozen=True)
class SmokeRun:
    """What the run left, read by the tests: each command's output, the state after the
    failure, the run's directory and MLflow run, and the arguments it was started with."""

    args: list[str]
    env: dict[str, str]
    cwd: Path
    s3_root: str
    failed: subprocess.CompletedProcess
    failed_state: dict
    failed_status: str  # the MLflow run's, after the failure
    resume: str
    resumed: subprocess.CompletedProcess
    run_dir: Path
    run_id: str


@pytest.fixture(scope="module")
def smoke_run(
    seaweedfs: SeaweedFS, mlflow_server: MLflowServer, tmp_path_factory: pytest.TempPathFactory
):
    root = tmp_path_factory.mktemp("smoke-run")
    bucket = S3Bucket(seaweedfs, f"smoke-{root.name.lower()}")
    seaweedfs.client().create_bucket(Bucket=bucket.name)
    pipeline = pipeline_in(bucket, mlflow_server, root)
    tarball = root / "upload" / "cifar-10-python.tar.gz"
    args = [*pipeline.args, *sets([*SMALL, *CRASHING, f"data.source={tarball}", "data.md5=none"])]

    # 1. The upload is not complete yet (half the tarball): staging fails. (A tarball that
    # is not there at all is refused before anything runs.)
    tarball.parent.mkdir()
    write_cifar_tarball(tarball, per_batch=60, seed=3)
    whole = tarball.read_bytes()
    tarball.write_bytes(whole[: len(whole) // 2])
    failed = cifar(args, pipeline.cwd, pipeline.env)
    run_dir = only_run_dir(pipeline.cwd)
    failed_state = state_of(run_dir)
    run_id = failed_state["globals"]["workflow.outputs.parameters.mlflow-run-id"]
    failed_status = pipeline.mlflow.get_run(run_id).info.status

    # 2. Finish the upload and resume, as printed, from a shell without the venv on PATH.
    tarball.write_bytes(whole)
    resume = f"{sys.executable} {REPO_ROOT / 'flows' / 'cifar.py'} --resume runs/{run_dir.name}"
    resumed = subprocess.run(
        ["/bin/sh", "-c", resume],
        cwd=pipeline.cwd,
        env={**pipeline.env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    found = SmokeRun(
        args, pipeline.env, pipeline.cwd, pipeline.s3_root, failed, failed_state,
        failed_status, resume, resumed, run_dir, run_id,
    )  # fmt: skip
    return found, pipeline.mlflow


def test_a_failed_stage_names_the_task_and_offers_resume(smoke_run) -> None:
    run, _ = smoke_run
    failed, state = run.failed, run.failed_state
    assert failed.returncode == 1, failed.stderr
    assert state["tasks"]["stage"]["state"] == "Failed"
    assert state["tasks"]["train"]["state"] == "Omitted"
    assert "task stage failed" in failed.stderr
    assert "truncated or not a gzip tarball" in failed.stderr  # the step's own line, from its log
    assert run.failed_status == "FAILED"
    # the exit handler's delete of the training job runs only when training itself did
    # not succeed (issue 30): here it never ran, so there is no job to delete
    assert state["exit_handler"]["state"] == "Succeeded"
    assert state["tasks"]["onExit.delete-train-job"]["state"] == "Skipped"
    # a fault, not a user error (exit 1): --resume is offered, with this interpreter
    assert f"Continue after a fix with: {run.resume}\n" in failed.stderr


def test_the_run_resumed_as_printed_finishes_and_keeps_its_mlflow_run(smoke_run) -> None:
    run, mlflow = smoke_run
    resumed = run.resumed
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # what to do next names the config the run started with, not the default one
    assert f"serve --config {REPO_ROOT / 'configs' / 'smoke.yaml'} --set " in resumed.stderr
    for log in (run.run_dir / "logs").iterdir():
        assert "\x1b" not in log.read_text(errors="replace"), log  # no colour codes
    state = state_of(run.run_dir)
    assert {t: state["tasks"][t]["state"] for t in STEPS} == dict.fromkeys(STEPS, "Succeeded")
    assert state["tasks"]["create-run"]["message"] == "kept from the earlier run"
    assert state["tasks"]["optimize"]["outputs"]["optimized"].startswith(run.s3_root)
    assert float(state["tasks"]["train"]["outputs"]["test_accuracy"]) >= 0.0
    assert state["tasks"]["create-run"]["attempts"] == 1
    mlflow_run = mlflow.get_run(run.run_id)
    assert mlflow_run.info.status == "FINISHED"
    params, metrics = mlflow_run.data.params, mlflow_run.data.metrics
    assert params["train.model"] == "simplecnn" and params["train.nproc_per_node"] == "2"
    assert any(k.startswith("train") or "loss" in k for k in metrics), sorted(metrics)
    assert any(k.startswith("bench/") for k in metrics), sorted(metrics)
    assert any("optimize" in k or "parity" in k for k in metrics), sorted(metrics)
    assert (run.run_dir / "artifacts" / "benchmark" / "report.md").is_file()
    assert f"mlflow-run-url: {mlflow.tracking_uri}/#/experiments/" in resumed.stderr


def test_the_first_champion_is_deployed_checked_live_and_stopped(smoke_run) -> None:
    run, mlflow = smoke_run
    assert run.resumed.returncode == 0, run.resumed.stderr[-3000:]
    state = state_of(run.run_dir)
    assert state["tasks"]["benchmark"]["outputs"]["promoted"] == "true"
    assert state["tasks"]["deploy"]["state"] == "Succeeded"
    assert state["tasks"]["serve-check"]["state"] == "Succeeded"
    assert state["tasks"]["serve-check"]["outputs"]["passed"] == "true"
    # the local server declares binary tensors: checked over the Open Inference Protocol
    (check,) = (run.run_dir / "tasks" / "serve-check").glob("outputs/**/summary.json")
    assert json.loads(check.read_text())["protocol"] == "v2"
    (service,) = state["services"].values()
    assert service["state"] == "Stopped" and service["url"].startswith("http://127.0.0.1:")
    assert not psutil.pid_exists(service["pid"])
    port = int(service["url"].rsplit(":", 1)[1])
    assert all(c.laddr.port != port for c in psutil.net_connections() if c.status == "LISTEN")
    mlflow_run = mlflow.get_run(run.run_id)
    served = float(state["tasks"]["serve-check"]["outputs"]["accuracy"])  # 6 digits
    assert mlflow_run.data.metrics["serving/accuracy"] == pytest.approx(served, abs=1e-6)
    assert mlflow_run.data.tags["serving.url"] == service["url"]
    note = mlflow_run.data.tags["mlflow.note.content"]
    assert re.search(r"\*\*Registry\*\* promoted: v\d+ \((first champion|accuracy)", note), note
    assert f"**Stopped** `{service['url']}` was this local run's server" in note


def test_a_variant_whose_builder_crashes_costs_that_variant_alone(smoke_run) -> None:
    """Issue 42: the run ends Succeeded; optimize built the others and recorded the crash
    (its summary, its log, the pipeline's MLflow run), and the benchmark lists it."""
    run, mlflow = smoke_run
    assert run.resumed.returncode == 0, run.resumed.stderr[-3000:]
    state = state_of(run.run_dir)
    assert state["tasks"]["optimize"]["state"] == "Succeeded"
    (found,) = (run.run_dir / "tasks" / "optimize").glob("outputs/**/summary.json")
    variants = json.loads(found.read_text())["variants"]
    assert variants["onnx"]["status"] == "built"
    assert (variants["segv"]["status"], variants["segv"]["failure"]) == ("failed", "crashed")
    reason = variants["segv"]["reason"]
    assert reason.startswith("build: process crashed (SIGSEGV, in File ") and "string_at" in reason
    log = (run.run_dir / "logs" / "optimize.log").read_text()
    assert re.search(r"segv +fp32 +failed +build: process crashed \(SIGSEGV", log), log[-2000:]
    report = (run.run_dir / "artifacts" / "benchmark" / "report.md").read_text()
    assert f"- segv: failed: {reason}" in report
    assert mlflow.get_run(run.run_id).data.tags["optimize.failed.segv"] == reason


def test_each_step_reports_its_work_and_its_start_up(smoke_run) -> None:
    """benchmarks/local_overhead.py reads both."""
    run, _ = smoke_run
    state = state_of(run.run_dir)
    assert state["exit_handler"]["state"] == "Succeeded"
    assert state["tasks"]["onExit.delete-train-job"]["state"] == "Skipped"  # it Succeeded
    for task in ("create-run", "stage", "train", "optimize", "benchmark", "onExit.close-run"):
        found = sorted((run.run_dir / "tasks" / task).glob("outputs/**/summary.json"))
        summary = json.loads(found[0].read_text())
        assert summary["seconds"] > 0 and summary["startup_seconds"] > 0.05, (task, summary)


def test_a_second_run_of_the_same_source_is_served_from_the_memo_cache(smoke_run) -> None:
    """A new workflow from the same data source: staging Cached (its memo key is the
    source's hash, flows/cifar.py), the rest run (SMALL, as the first): it adds a run beside
    the shared one and changes none of it."""
    run, mlflow = smoke_run
    assert run.resumed.returncode == 0, run.resumed.stderr[-3000:]
    second = cifar(run.args, run.cwd, run.env)
    assert second.returncode == 0, second.stderr[-3000:]
    second_dir = only_run_dir(run.cwd, exclude={run.run_dir})
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
    assert new_run != run.run_id and mlflow.get_run(new_run).info.status == "FINISHED"
