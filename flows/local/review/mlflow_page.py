"""The run's page kept with its MLflow run, once the run ended (its exit handler closed the
MLflow run; an artifact can still be added): ``workflow/index.html`` among the run's
artifacts, the page MLflow's UI shows. The MLflow run and its store are the ones the
run's steps used: the run id the workflow put out, the tracking URI its pods were given."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from flows.local.review.page import PAGE
from flows.local.review.runs import load_state

RUN_ID = "workflow.outputs.parameters.mlflow-run-id"
ARTIFACT_DIR = "workflow"


def tracking_uri(state: dict[str, Any]) -> str | None:
    """The MLFLOW_TRACKING_URI the run's containers were given, else this environment's."""
    for template in state["manifest"].get("spec", {}).get("templates", []):
        for item in template.get("container", {}).get("env", []) or []:
            if item.get("name") == "MLFLOW_TRACKING_URI" and item.get("value"):
                return str(item["value"])
    return os.environ.get("MLFLOW_TRACKING_URI")


def log_page(run_dir: Path) -> list[str]:
    """Log ``index.html`` to the run's MLflow run; one line saying where, or why not (a
    run that made no MLflow run says nothing)."""
    page = run_dir / PAGE
    try:
        state = load_state(run_dir)
    except ValueError:
        return []
    run_id, uri = state.get("globals", {}).get(RUN_ID), tracking_uri(state)
    if not run_id or not uri or not page.is_file():
        return []
    from mlflow import MlflowClient  # lazy: only a run that tracked pays for it
    from mlflow.exceptions import MlflowException

    try:
        MlflowClient(tracking_uri=uri).log_artifact(run_id, str(page), ARTIFACT_DIR)
    except (MlflowException, OSError) as exc:
        return [f"The run's page was not added to MLflow run {run_id}: {exc}"]
    return [f"The run's page is in its MLflow run too: {ARTIFACT_DIR}/{PAGE}"]
