"""Before the pipeline builds on a memo hit: are the objects it points at still there?

    python -m steps.reuse --step {stage,train,optimize,benchmark} --reused JSON
        [--mlflow-run-id ID] [--outputs-dir DIR] [--config F] [--set k=v ...] [--debug]

Argo hands on a memo entry's outputs as they were saved (v4.0.5 workflow/controller/
operator.go ``executeTemplate``), URIs of objects that may have been deleted since. The
workflow runs this after each hit (flows/pipeline/reuse_templates.py) with the hit's outputs
(``--reused``: ``workflow`` that ran the step, its URI, its MLflow run, a benchmark's
decision). It checks the object each step publishes last; for the benchmark also that the
registry is where its decision left it (the alias on the version it promoted, or still on
the champion it kept; that version not rolled back since), since the decision is about the
registry as it was. Then it writes ``gone``: ``false``, and the reuse of train, optimize or
benchmark goes into this run's MLflow run (``steps.reuse.record``), or ``true``: the
workflow runs the step again. Either way one line says which.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from steps.common.config import ConfigError, PipelineConfig, load_config
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.variants import VariantsManifest
from steps.common.dataset import MANIFEST
from steps.common.step_cli import add_common, run_main, step_seconds, tracking_wanted, write_outputs
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.reuse", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--step", required=True, choices=sorted(PUBLISHED))
    parser.add_argument("--reused", required=True, help="the hit's outputs as a JSON object")
    add_common(parser)
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    cfg = load_config(args.config, args.overrides)
    reused = _outputs(args.reused)
    source = reused.get("workflow") or "an earlier workflow"
    problem = missing_object(cfg, args.step, reused)
    if problem is None and args.step == "benchmark" and tracking_wanted(cfg, args.mlflow_run_id):
        problem = registry_moved(cfg, reused)
    if problem:
        line = f"{args.step}: the memo from {source} no longer holds ({problem}): runs again"
    else:
        line = f"{args.step}: reused from {source}"
        # staging logs nothing to MLflow: nothing to carry (and no MLflow import to pay)
        if args.step != "stage" and tracking_wanted(cfg, args.mlflow_run_id) and args.mlflow_run_id:
            from steps.reuse.record import record_reuse

            line += record_reuse(cfg, args.step, reused, args.mlflow_run_id)
    print(line, file=sys.stderr)
    summary = {**step_seconds(started), "gone": problem is not None, "line": line}
    write_outputs(
        args.outputs_dir, {"gone": str(problem is not None).lower(), "summary.json": summary}
    )
    return summary


def _outputs(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--reused {text[:80]!r}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"--reused {text[:80]!r}: give a JSON object of the step's outputs")
    return {str(k): str(v) for k, v in value.items()}


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


def main(argv: list[str] | None = None) -> int:
    return run_main("reuse", run, build_parser().parse_args(argv))
