"""The pipeline's exit handler, run whatever happened: ``close-run`` ends the MLflow run
with the workflow's status and copies the run's pictures out as artifacts; when training
itself did not succeed (its job failed, or ``argo stop`` stopped the run while it
trained), ``delete-train-job`` deletes the run's training job now, so its pods free their
GPUs before the workflow's TTL would take the job with it (``flows.train_step``
``delete_template``, ``delete_when``)."""

from __future__ import annotations

from collections.abc import Sequence

from hera.workflows import DAG, Artifact, NoneArchiveStrategy
from hera.workflows import models as m

from flows.container_step import container_step
from flows.manifests.pod import OUTPUTS_DIR
from flows.train_step import delete_template, delete_when
from steps.common.config import PipelineConfig

EXIT_HANDLER = "exit-handler"
CLOSE_RUN = "close-run"
DELETE_JOB = "delete-train-job"
RUN_ID_GLOBAL = "mlflow-run-id"
# what close-run copies from the MLflow run (steps.tracking.PICTURES; not imported here:
# rendering must not load mlflow)
PICTURES = ("curves.png", "confusion_matrix.png", "benchmark.png")
# The report artifacts are copies of what the MLflow run holds: deleted with the workflow.
# Pod logs (archiveLogs) follow the workflow-level strategy, none: they outlive it.
REPORT_GC = m.ArtifactGC(strategy="OnWorkflowDeletion")


def define_exit_handler(
    cfg: PipelineConfig, settings: Sequence[str], link: Sequence[str], out_dir: Sequence[str]
) -> None:
    """The exit handler's templates and its DAG, inside the active workflow context."""
    run_id_global = f"{{{{workflow.outputs.parameters.{RUN_ID_GLOBAL}}}}}"
    status = ["--status", "{{workflow.status}}"]
    stopped = ["--failures", "{{workflow.failures}}"]  # `argo stop` ends the MLflow run KILLED
    close_run = container_step(
        cfg,
        name=CLOSE_RUN,
        image="train",
        tracking=True,
        module="steps.tracking",
        args=["end", "--run-id", run_id_global, *status, *link, *out_dir, *stopped],
        # the run's pictures, which the Argo UI shows; a failed run may lack some
        outputs=[
            Artifact(
                name=name.removesuffix(".png").replace("_", "-"),
                path=f"{OUTPUTS_DIR}/{name}",
                archive=NoneArchiveStrategy(),
                optional=True,
                artifact_gc=REPORT_GC,
            )
            for name in PICTURES
        ],
        settings=settings,
    )
    delete_job = delete_template(cfg)
    with DAG(name=EXIT_HANDLER):
        close_run(name=CLOSE_RUN)
        delete_job(name=DELETE_JOB, when=delete_when())
