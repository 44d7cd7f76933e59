"""The pipeline's MLflow run: ``create-run`` opens it first, ``close-run`` (in the exit
handler, whatever happened) ends it with the workflow's status and copies the run's
pictures out as artifacts. Both run ``python -m steps.tracking`` (start, end)."""

from __future__ import annotations

from collections.abc import Sequence

from hera.workflows import Container

from flows.manifests.names import APP
from flows.manifests.shared_pod import OUTPUTS_DIR
from flows.pipeline.step_template import container_step, file_output, report_artifact
from steps.common.config import PipelineConfig

RUN_ID_GLOBAL = "mlflow-run-id"
RUN_URL_GLOBAL = "mlflow-run-url"
# what close-run copies from the MLflow run (steps.tracking.PICTURES; not imported here:
# rendering must not load mlflow)
PICTURES = ("curves.png", "confusion_matrix.png", "benchmark.png")
OUT_DIR = ["--outputs-dir", OUTPUTS_DIR]


def create_run_template(cfg: PipelineConfig, settings: Sequence[str], argo_link: str) -> Container:
    """``create-run``: the pipeline's MLflow run, tagged with the workflow and its link; its
    id and URL as workflow-wide outputs."""
    tags = ["--tag", "argo.workflow={{workflow.name}}", "--tag", f"{APP}.version={cfg.images.tag}"]
    tags += ["--tag", f"argo.workflow_url={argo_link}"] if argo_link else []
    return container_step(
        cfg,
        name="create-run",
        image="train",
        tracking=True,
        module="steps.tracking",
        args=["start", "--run-name", "{{workflow.name}}", *tags, *OUT_DIR],
        settings=settings,
        outputs=[
            file_output("run-id", "run_id", RUN_ID_GLOBAL),
            file_output("run-url", "run_url", RUN_URL_GLOBAL),
        ],
    )


def close_run_template(cfg: PipelineConfig, settings: Sequence[str], argo_link: str) -> Container:
    """``close-run``: the MLflow run ended with ``{{workflow.status}}`` (KILLED after
    ``argo stop``, read from ``{{workflow.failures}}``), the Argo link on it, and the
    run's pictures, which the Argo UI shows, as artifacts (a failed run may lack some)."""
    run_id = f"{{{{workflow.outputs.parameters.{RUN_ID_GLOBAL}}}}}"
    status = ["--status", "{{workflow.status}}"]
    link = ["--argo-url", argo_link] if argo_link else []
    stopped = ["--failures", "{{workflow.failures}}"]
    return container_step(
        cfg,
        name="close-run",
        image="train",
        tracking=True,
        module="steps.tracking",
        args=["end", "--run-id", run_id, *status, *link, *OUT_DIR, *stopped],
        outputs=[
            report_artifact(name.removesuffix(".png").replace("_", "-"), name, optional=True)
            for name in PICTURES
        ],
        settings=settings,
    )
