"""Names, labels, annotations and links of what the pipeline creates: DNS-1035 names cut
with a hash to fit, the app's labels, the Argo UI and MLflow links."""

from __future__ import annotations

import hashlib
import re

from flows.errors import FlowError
from steps.common.config import PipelineConfig

APP = "cifar-pipeline"
MAX_NAME = 63


def dns1035(text: str, max_len: int = MAX_NAME) -> str:
    """A DNS-1035 label from ``text`` in at most ``max_len`` characters; a cut name ends
    with 8 hex digits of the full name's hash, so two long names stay apart."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    name = re.sub(r"-+", "-", name).lstrip("-0123456789").rstrip("-") or "job"
    if len(name) <= max_len:
        return name
    if max_len < 10:
        raise FlowError(f"no room for a name: {max_len} characters left for {text!r}")
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: max_len - 9].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return value.strip("-._")


def labels(cfg: PipelineConfig) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/version": label_value(cfg.images.tag),
        "app.kubernetes.io/managed-by": "hera",
    }


def description(cfg: PipelineConfig) -> str:
    """The workflow's DAG in one line (the Argo UI shows it under the name): the training
    job the config's launcher creates, and the serving tasks when serving is on
    (flows/serve_tasks.py)."""
    job = "TrainJob" if cfg.train.launcher == "trainjob" else "PyTorchJob"
    dag = f"stage, train ({job}), optimize, benchmark"
    if cfg.serving.enabled:
        dag += (
            "; deploy (InferenceService) and serve-check when the champion moved, "
            "rolled back if either fails"
        )
    return f"CIFAR-10: {dag}; one MLflow run"


def annotations(cfg: PipelineConfig, git_revision: str | None) -> dict[str, str]:
    notes = {
        "workflows.argoproj.io/description": description(cfg),
        f"{APP}/version": cfg.images.tag,
        f"{APP}/mlflow-experiment": cfg.tracking.experiment,
    }
    if mlflow_ui(cfg):
        notes[f"{APP}/mlflow-ui"] = str(mlflow_ui(cfg))
    if git_revision:
        notes[f"{APP}/git-revision"] = git_revision
    return notes


def argo_ui(cfg: PipelineConfig) -> str | None:
    base = cfg.cluster.argo_ui_url or cfg.cluster.argo_host
    return base.rstrip("/") if base else None


def mlflow_ui(cfg: PipelineConfig) -> str | None:
    base = cfg.tracking.ui_url or cfg.tracking.uri
    return base.rstrip("/") if base.startswith(("http://", "https://")) else None


def workflow_url(cfg: PipelineConfig, namespace: str, name: str) -> str | None:
    """The workflow's page in the Argo UI (names may be Argo ``{{...}}`` expressions)."""
    base = argo_ui(cfg)
    return f"{base}/workflows/{namespace}/{name}" if base else None


def run_root(cfg: PipelineConfig) -> str:
    """Where this workflow's objects live: derived from its name, so a retry finds them."""
    return f"{cfg.storage.root_uri.rstrip('/')}/runs/{{{{workflow.name}}}}"
