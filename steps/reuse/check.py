"""Whether a memo hit still holds: the object each step publishes last is there, and for
the benchmark the registry is where its decision left it (steps.reuse.step is the command
line; the module docstring there says when the workflow runs it)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from steps.common.config import PipelineConfig
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.variants import VariantsManifest
from steps.common.dataset import MANIFEST
from steps.common.step_cli import step_seconds, tracking_wanted
from steps.common.storage import StorageError, open_store

# step -> (its output URI, the object it writes last there: present means complete)
PUBLISHED = {
    "stage": ("dataset-uri", MANIFEST),  # steps.stage_data: manifest.json last
    "train": ("model-uri", "model.json"),  # steps.train.outputs: weights.pt, then model.json
    "optimize": ("optimized", VariantsManifest.DOCUMENT),  # steps.optimize: variants.json last
    "benchmark": ("report-uri", BenchmarkReport.DOCUMENT),  # steps.benchmark: benchmark.json last
}
# steps.serve_check.rollback's tag on a version whose deployment or check failed (a step
# imports no other step: the name is repeated here)
ROLLBACK_TAG = "serving.rollback"


@dataclass(frozen=True)
class ReuseResult:
    """The check's verdict: ``gone`` (the workflow runs the step again), the one line that
    says which, and its times (``steps.common.step_cli.step_seconds``)."""

    step: str
    gone: bool
    line: str
    times: dict[str, float | None]

    def summary(self) -> dict[str, object]:
        """``summary.json``."""
        return {**self.times, "gone": self.gone, "line": self.line}


def check_reuse(
    cfg: PipelineConfig, step: str, reused: dict[str, str], mlflow_run_id: str | None
) -> ReuseResult:
    """Check a hit of ``step`` whose outputs are ``reused``; when it holds, record the reuse
    of train, optimize or benchmark in this run's MLflow run (``steps.reuse.record``)."""
    started = time.perf_counter()
    source = reused.get("workflow") or "an earlier workflow"
    tracked = tracking_wanted(cfg, mlflow_run_id)
    problem = missing_object(cfg, step, reused)
    if problem is None and step == "benchmark" and tracked:
        problem = registry_moved(cfg, reused)
    if problem:
        line = f"{step}: the memo from {source} no longer holds ({problem}): runs again"
    else:
        line = f"{step}: reused from {source}"
        # staging logs nothing to MLflow: nothing to carry (and no MLflow import to pay)
        if step != "stage" and tracked and mlflow_run_id:
            from steps.reuse.record import record_reuse

            line += record_reuse(cfg, step, reused, mlflow_run_id)
    return ReuseResult(step, problem is not None, line, step_seconds(started))


def missing_object(cfg: PipelineConfig, step: str, reused: dict[str, str]) -> str | None:
    """What is gone of the step's published outputs, or None."""
    name, marker = PUBLISHED[step]
    uri = reused.get(name, "")
    if not uri:
        return f"it names no {name}"
    try:
        store = open_store(uri, cfg.storage)
        if store.exists(marker):
            return None
    except StorageError as exc:
        return f"{uri} cannot be read: {exc}"
    return f"{store.uri(marker)} no longer exists"


def registry_moved(cfg: PipelineConfig, reused: dict[str, str]) -> str | None:
    """Whether the registry moved since the reused benchmark decided: the alias is no longer
    where the decision left it, or that version was rolled back."""
    version = reused.get("model-version", "")
    if not version:  # tracking was off then: nothing was registered
        return None
    import mlflow
    from mlflow.exceptions import MlflowException

    from steps.common.pipeline_run import connect

    connect(cfg.tracking)
    client = mlflow.MlflowClient()
    name, alias = cfg.benchmark.registered_model, cfg.benchmark.alias
    promoted = reused.get("promoted") == "true"
    expected = version if promoted else reused.get("previous-version", "")
    try:
        current = client.get_model_version_by_alias(name, alias).version
    except MlflowException:
        current = ""
    if str(current) != expected:
        now, then = f"v{current}" if current else "none", f"v{expected}" if expected else "none"
        return f"{name}@{alias} is {now}, its decision left {then}"
    try:
        tags = client.get_model_version(name, version).tags
    except MlflowException:
        return f"{name} v{version} no longer exists"
    if promoted and ROLLBACK_TAG in tags:
        return f"{name} v{version} was rolled back since"
    return None
