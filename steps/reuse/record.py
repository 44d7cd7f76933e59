"""A reused step in this run's MLflow run, so the run reads complete: which run did the work
(a tag and a link), and what that step had logged there, carried over.

- train, optimize, benchmark (staging logs nothing to MLflow): tags
  ``reused.<step>.run_id``, ``reused.<step>.workflow`` and ``reused.<step>.run_url`` (the
  earlier run's page);
- its metrics, whole histories (train: the unprefixed ones, optimize ``optimize/...``,
  benchmark ``bench/...``), its tags (``train.*``, ``optimize.*``, ``bench.*``), and its
  small files (train: the plots and model.json, whose pictures ``close-run`` shows;
  optimize: variants.json; benchmark: the report);
- train: this run's config as params (what training logs), the dataset input, and the
  trained model as an input of this run (MLflow 3's logged model: its reference);
- benchmark: the earlier run's description, under a line saying whose it is, when this run
  has none yet.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import mlflow
from mlflow.entities import LoggedModelInput, Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from steps.common.config import PipelineConfig, flatten
from steps.common.contracts.variants import VariantsManifest
from steps.common.pipeline_run import connect, run_url

NOTE_TAG = "mlflow.note.content"
BATCH = 900  # MLflow takes at most 1000 metrics in one log_batch


def _metric_of(step: str, key: str) -> bool:
    if step == "train":
        return "/" not in key  # the epochs' and final numbers; system/... is every step's
    return key.startswith({"optimize": "optimize/", "benchmark": "bench/"}.get(step, "\0"))


TAG_PREFIX = {"train": "train.", "optimize": "optimize.", "benchmark": "bench."}
FILES = {
    "train": ["plots/curves.png", "plots/confusion_matrix.png", "model/model.json"],
    "optimize": [f"optimized/{VariantsManifest.DOCUMENT}"],
    "benchmark": ["benchmark"],
}


def record_reuse(cfg: PipelineConfig, step: str, reused: dict[str, str], run_id: str) -> str:
    """Write the reuse of ``step`` into run ``run_id``; returns the end of the step's line
    (which earlier run, or why nothing was carried)."""
    connect(cfg.tracking)
    client = mlflow.MlflowClient()
    source = reused.get("mlflow-run-id", "")
    tags = {f"reused.{step}.workflow": reused.get("workflow", "")}
    if not source:  # the earlier step ran untracked: which workflow did it is all there is
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        return ""
    tags[f"reused.{step}.run_id"] = source
    try:
        earlier = client.get_run(source)
    except MlflowException:
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        return f" (its MLflow run {source} is not on this server: nothing carried over)"
    url = run_url(cfg.tracking, earlier.info.experiment_id, source)
    tags[f"reused.{step}.run_url"] = url
    prefix = TAG_PREFIX.get(step)
    if prefix:
        tags |= {k: v for k, v in earlier.data.tags.items() if k.startswith(prefix)}
    metrics = [
        Metric(m.key, m.value, m.timestamp, m.step)
        for key in earlier.data.metrics
        if _metric_of(step, key)
        for m in client.get_metric_history(source, key)
    ]
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    if step == "train":  # what training logs: this run's config; a conflict (a param
        # logged before with another value) leaves the params to what is there
        params = [Param(k, v[:6000]) for k, v in flatten(cfg).items()]
        with contextlib.suppress(MlflowException):
            client.log_batch(run_id, params=params)
    for at in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=metrics[at : at + BATCH])
    _copy_files(client, source, run_id, FILES.get(step, []))
    if step == "train":
        _train_inputs(client, earlier, run_id)
    if step == "benchmark":
        note = earlier.data.tags.get(NOTE_TAG)
        if note and NOTE_TAG not in client.get_run(run_id).data.tags:
            line = f"**Reused** the benchmark of [run {source}]({url}) ({reused.get('workflow')})"
            client.set_tag(run_id, NOTE_TAG, f"{line}\n\n{note}")
    return f" (MLflow run {source}: {url})"


def _copy_files(client: mlflow.MlflowClient, source: str, run_id: str, paths: list[str]) -> None:
    """The earlier run's small files (or folder) at the same paths in this run; one that it
    never logged (a failed plot) is skipped."""
    with tempfile.TemporaryDirectory(prefix="reuse-") as tmp:
        for path in paths:
            try:
                local = Path(client.download_artifacts(source, path, tmp))
            except (MlflowException, OSError):
                continue
            folder = str(Path(path).parent) if local.is_file() else path
            if local.is_file():
                client.log_artifact(run_id, str(local), None if folder == "." else folder)
            else:
                client.log_artifacts(run_id, str(local), folder)


def _train_inputs(client: mlflow.MlflowClient, earlier, run_id: str) -> None:
    """The earlier run's dataset input, and the model it trained (``train.logged_model_uri``,
    ``models:/<model id>``) as this run's input."""
    datasets = list(earlier.inputs.dataset_inputs) if earlier.inputs else []
    logged = earlier.data.tags.get("train.logged_model_uri", "")
    models = [LoggedModelInput(logged.removeprefix("models:/"))] if logged else []
    if datasets or models:
        client.log_inputs(run_id, datasets=datasets or None, models=models or None)
