"""``python flows/cifar.py`` end to end on this machine: the smoke config made small (one
epoch on 2 DDP processes, one optimize variant, one batch size: tests/helpers/pipeline_runs.py's
SMALL, as nothing here asserts the model's accuracy or the variants' numbers; the README's
smoke run itself is test_first_hour.py's), against a real SeaweedFS S3 server and a real
``mlflow server``.

One run (conftest.py's session fixture ``smoke_run``, tests/helpers/pipeline_runs.py), shared by
the tests below and tests/test_review_smoke.py, which only read it: staging fails on a
tarball whose upload is not complete yet, the run is resumed as printed once the upload is
whole, and it ends with the first champion deployed, checked live and stopped. One extra
optimize variant's builder segfaults (``optimize.extra_variants``,
tests/helpers/faulty_builders.py): the run still ends Succeeded, that variant recorded as crashed
(issue 42). Then the same run again: a second workflow that reuses stage, train, optimize
and benchmark from the memo cache (their keys did not change) and deploys and checks the
champion they decided."""

from __future__ import annotations

import json
import re

import psutil
import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.pipeline_runs import cifar, only_run_dir, state_of

pytestmark = pytest.mark.slow
STEPS = ["create-run", "stage", "train", "optimize", "benchmark"]


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
    """A new workflow with nothing changed: every memoized step Cached from the first (their
    keys, flows/pipeline/memo_keys.py, are the same), each hit checked (its objects are there) and
    recorded in the new MLflow run; deploy and serve-check, never memoized, follow the
    reused decision: the alias is still on the version it promoted. It adds a run beside
    the shared one and changes none of it."""
    run, mlflow = smoke_run
    assert run.resumed.returncode == 0, run.resumed.stderr[-3000:]
    second = cifar(run.args, run.cwd, run.env)
    assert second.returncode == 0, second.stderr[-3000:]
    second_dir = only_run_dir(run.cwd, exclude={run.run_dir})
    state = state_of(second_dir)
    reused = ["stage", "train", "optimize", "benchmark"]
    assert {t: state["tasks"][t]["state"] for t in reused} == dict.fromkeys(reused, "Cached")
    assert f"memoized: reused from {run.run_dir.name}" in second.stderr
    assert {state["tasks"][f"{t}-reused"]["state"] for t in reused} == {"Succeeded"}
    assert {state["tasks"][f"{t}-again"]["state"] for t in reused} == {"Skipped"}
    # the earlier run's outputs are what the reusing tasks read
    assert state["tasks"]["train"]["outputs"]["model-uri"].endswith(
        f"/runs/{run.run_dir.name}/model"
    )
    promoted = state["tasks"]["benchmark"]["outputs"]["promoted"] == "true"
    expected = "Succeeded" if promoted else "Skipped"
    assert {t: state["tasks"][t]["state"] for t in ("deploy", "serve-check")} == dict.fromkeys(
        ("deploy", "serve-check"), expected
    )
    new_run = state["globals"]["workflow.outputs.parameters.mlflow-run-id"]
    assert new_run != run.run_id and mlflow.get_run(new_run).info.status == "FINISHED"
    tags = mlflow.get_run(new_run).data.tags
    assert tags["reused.train.run_id"] == run.run_id
    assert tags["reused.benchmark.workflow"] == run.run_dir.name
