"""A run after a change re-runs exactly what the change decides, for real: ``python
flows/cifar.py`` on this machine, each run after the first with one thing changed, over one
memo cache, a real SeaweedFS S3 and a real ``mlflow server``. The key table for the cluster
is tests/test_memo_keys.py's; this is the same table run here, where a step's source
stands in for its image (flows/pipeline/memo_keys.py).

The runs are made tiny (tests/helpers/pipeline_runs.py's SMALL, one process, 500 images, no
serving): what they assert is which tasks run and what the reusing run records, not the
model. Two module fixtures make them once, in order (each within the suite's timeout);
the tests only read them. A train setting and the data source re-run training like the
``-p`` parameter here and everything like a first run: their rows are the cluster
table's (tests/test_memo_keys.py), the same keys."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from flows.local.servers.mlflow_server import MLflowServer
from flows.local.servers.seaweedfs import SeaweedFS
from tests.helpers.buckets import S3Bucket
from tests.helpers.paths import REPO_ROOT
from tests.helpers.pipeline import Pipeline, pipeline_in
from tests.helpers.pipeline_runs import SMALL, only_run_dir, sets, state_of

pytestmark = pytest.mark.slow
MEMOIZED = ("stage", "train", "optimize", "benchmark")
TINY = [*SMALL, "serving.enabled=false", "train.nproc_per_node=1", "data.source=synthetic:500"]
# run -> (extra arguments, the checkout it runs from: None for this one), in order
CHANGES = {
    # first: a later run's benchmark may move the alias, and a reused benchmark decision
    # holds only while the registry is as it left it (steps/reuse/step.py)
    "image tag": (sets(["images.tag=9.9.9"]), None),
    "optimize setting": (sets(["optimize.fp32_max_abs_diff=0.002"]), None),
    "steps/optimize edited": ([], "edited"),
}
LATER = {"-p parameter": (["-p", "lr=0.01"], None)}  # after the first ones (memo_later)
RERUN = {  # what each change re-runs; the rest is Cached
    "optimize setting": {"optimize", "benchmark"},
    "steps/optimize edited": {"optimize", "benchmark"},
    "image tag": set(),  # no image runs here: the source stands in for it
    "-p parameter": {"train", "optimize", "benchmark"},
}


@dataclass
class Run:
    done: subprocess.CompletedProcess
    state: dict
    name: str


@dataclass
class MemoRuns:
    pipeline: Pipeline
    bucket: S3Bucket
    runs: dict[str, Run] = field(default_factory=dict)


def edited_checkout(root: Path) -> Path:
    """This checkout's code with one line added to steps/optimize/: a fix there."""
    copy = root / "edited"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("flows", "steps", "configs"):
        shutil.copytree(REPO_ROOT / part, copy / part, ignore=ignore)
    shutil.copyfile(REPO_ROOT / "pyproject.toml", copy / "pyproject.toml")
    with (copy / "steps" / "optimize" / "builders.py").open("a") as handle:
        handle.write("\n# a fix to the optimize step\n")
    return copy


@dataclass
class Runner:
    """``python flows/cifar.py`` (this checkout's, or another's) with the pipeline's and
    TINY's arguments, each run's state recorded under a label."""

    pipeline: Pipeline
    found: MemoRuns
    seen: set[Path] = field(default_factory=set)

    def __call__(self, label: str, extra: list[str], checkout: Path = REPO_ROOT) -> None:
        env = {**self.pipeline.env, "PYTHONPATH": str(checkout)}
        argv = [sys.executable, str(checkout / "flows" / "cifar.py"), *self.pipeline.args]
        argv += [*sets(TINY), *extra]
        done = subprocess.run(
            argv, cwd=self.pipeline.cwd, env=env, capture_output=True, text=True, timeout=900
        )
        run_dir = only_run_dir(self.pipeline.cwd, exclude=self.seen)
        self.seen.add(run_dir)
        self.found.runs[label] = Run(done, state_of(run_dir), run_dir.name)


@pytest.fixture(scope="module")
def memo_runs(
    seaweedfs: SeaweedFS, mlflow_server: MLflowServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[MemoRuns, Runner]:
    """The baseline, then each change of CHANGES (none trains)."""
    root = tmp_path_factory.mktemp("memo-runs")
    bucket = S3Bucket(seaweedfs, f"memo-{root.name.lower()}"[:63])
    seaweedfs.client().create_bucket(Bucket=bucket.name)
    pipeline = pipeline_in(bucket, mlflow_server, root)
    found = MemoRuns(pipeline, bucket)
    run = Runner(pipeline, found)
    checkouts = {None: REPO_ROOT, "edited": edited_checkout(root)}
    run("baseline", [])
    for label, (extra, checkout) in CHANGES.items():
        run(label, extra, checkouts[checkout])
    return found, run


@pytest.fixture(scope="module")
def memo_later(memo_runs: tuple[MemoRuns, Runner], seaweedfs: SeaweedFS) -> MemoRuns:
    """Over the same cache: a -p parameter, then the baseline again after what it trained
    was deleted (its memo still names it: the hit is checked, found gone, and training
    runs again, and what reads the new model after it)."""
    found, run = memo_runs
    for label, (extra, _) in LATER.items():
        run(label, extra)
    bucket = found.bucket.name
    model = found.runs["baseline"].state["tasks"]["train"]["outputs"]["model-uri"]
    prefix = model.removeprefix(f"s3://{bucket}/").rstrip("/") + "/"
    s3 = seaweedfs.client()
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    assert listed, prefix
    for item in listed:
        s3.delete_object(Bucket=bucket, Key=item["Key"])
    run("model deleted", [])
    return found


def states(run: Run) -> dict[str, str]:
    return {step: run.state["tasks"][step]["state"] for step in MEMOIZED}


def test_the_baseline_runs_every_step(memo_runs: tuple[MemoRuns, Runner]) -> None:
    baseline = memo_runs[0].runs["baseline"]
    assert baseline.done.returncode == 0, baseline.done.stderr[-3000:]
    assert states(baseline) == dict.fromkeys(MEMOIZED, "Succeeded")


def reruns_exactly_what_it_decides(run: Run, change: str) -> None:
    assert run.done.returncode == 0, run.done.stderr[-3000:]
    wanted = {s: "Succeeded" if s in RERUN[change] else "Cached" for s in MEMOIZED}
    assert states(run) == wanted
    # a hit is checked and found whole; nothing runs again
    for step in MEMOIZED:
        check = run.state["tasks"][f"{step}-reused"]["state"]
        assert check == ("Skipped" if step in RERUN[change] else "Succeeded"), step
        assert run.state["tasks"][f"{step}-again"]["state"] == "Skipped"
    # the task table says where a Cached step came from
    for step in set(MEMOIZED) - RERUN[change]:
        note = run.state["tasks"][step]["message"]
        assert note.startswith("memoized: reused from cifar-"), note


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_reruns_exactly_what_it_decides(
    memo_runs: tuple[MemoRuns, Runner], change: str
) -> None:
    reruns_exactly_what_it_decides(memo_runs[0].runs[change], change)


def test_a_parameter_reruns_training_onward(memo_later: MemoRuns) -> None:
    reruns_exactly_what_it_decides(memo_later.runs["-p parameter"], "-p parameter")


def test_what_reuses_reads_the_earlier_outputs(memo_runs: tuple[MemoRuns, Runner]) -> None:
    """The optimize setting's run: optimize read the model the baseline trained, and wrote
    under its own run."""
    runs = memo_runs[0]
    baseline, run = runs.runs["baseline"], runs.runs["optimize setting"]
    model = baseline.state["tasks"]["train"]["outputs"]["model-uri"]
    assert model.endswith(f"/runs/{baseline.name}/model")
    assert run.state["tasks"]["train"]["outputs"]["model-uri"] == model
    optimize_log = runs.pipeline.cwd / "runs" / run.name / "logs" / "optimize.log"
    assert f"--model {model} " in optimize_log.read_text()
    assert run.state["tasks"]["optimize"]["outputs"]["optimized"].endswith(
        f"/runs/{run.name}/optimized"
    )


def test_mlflow_records_who_trained_a_reused_model(memo_runs: tuple[MemoRuns, Runner]) -> None:
    """The reusing run reads complete: the tag and link of the run that trained, its
    training metrics (whole histories), plots, the model as an input, the dataset, this
    run's config as params; the benchmark and its registry decision made as usual."""
    runs = memo_runs[0]
    mlflow = runs.pipeline.mlflow
    baseline, run = runs.runs["baseline"], runs.runs["optimize setting"]
    trained = baseline.state["globals"]["workflow.outputs.parameters.mlflow-run-id"]
    reusing = mlflow.get_run(run.state["globals"]["workflow.outputs.parameters.mlflow-run-id"])
    tags = reusing.data.tags
    assert tags["reused.train.run_id"] == trained
    assert tags["reused.train.workflow"] == baseline.name
    assert tags["reused.train.run_url"].endswith(f"/runs/{trained}")
    assert (
        tags["train.logged_model_uri"]
        == mlflow.get_run(trained).data.tags["train.logged_model_uri"]
    )
    history = [m.value for m in mlflow.get_metric_history(reusing.info.run_id, "train_loss")]
    assert history == [m.value for m in mlflow.get_metric_history(trained, "train_loss")]
    assert "final_test_accuracy" in reusing.data.metrics
    plots = {a.path for a in mlflow.list_artifacts(reusing.info.run_id, "plots")}
    assert plots == {"plots/curves.png", "plots/confusion_matrix.png"}
    model_id = tags["train.logged_model_uri"].removeprefix("models:/")
    assert model_id in {m.model_id for m in reusing.inputs.model_inputs}
    assert reusing.inputs.dataset_inputs  # what it was trained on
    assert reusing.data.params["optimize.fp32_max_abs_diff"] == "0.002"  # this run's config
    assert any(k.startswith("bench/") for k in reusing.data.metrics)  # benchmarked here
    assert "reused.benchmark.run_id" not in tags


def test_a_hit_whose_model_was_deleted_trains_again(memo_later: MemoRuns) -> None:
    """The baseline's model objects deleted: train's memo hit is checked, found gone (one
    line says so), and train-again trains into this run; what reads the model runs again
    since its input is a new URI."""
    run = memo_later.runs["model deleted"]
    assert run.done.returncode == 0, run.done.stderr[-3000:]
    tasks = run.state["tasks"]
    assert (tasks["stage"]["state"], tasks["train"]["state"]) == ("Cached", "Cached")
    assert tasks["train-reused"]["outputs"]["gone"] == "true"
    assert tasks["train-again"]["state"] == "Succeeded"
    model = tasks["train-again"]["outputs"]["model-uri"]
    assert model.endswith(f"/runs/{run.name}/model")
    assert {tasks[s]["state"] for s in ("optimize", "benchmark")} == {"Succeeded"}
    log = memo_later.pipeline.cwd / "runs" / run.name / "logs" / "train-reused.log"
    lines = [line for line in log.read_text().splitlines() if line.startswith("train: ")]
    baseline = memo_later.runs["baseline"].name
    assert len(lines) == 1 and lines[0].startswith(
        f"train: the memo from {baseline} no longer holds"
    )
    assert "model.json no longer exists): runs again" in lines[0]
    optimize_log = memo_later.pipeline.cwd / "runs" / run.name / "logs" / "optimize.log"
    assert f"--model {model} " in optimize_log.read_text()
