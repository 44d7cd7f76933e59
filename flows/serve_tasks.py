"""The pipeline's last tasks: ship the champion the benchmark promoted, check it live, and
roll back a check that fails.

    benchmark --(promoted == true)--> deploy --> serve-check --(Failed)--> rollback-apply
                                                                     \\--> rollback-delete

- ``deploy`` (flows/deploy_step.py): applies the InferenceService for the registry version
  the benchmark registered, until Ready; Skipped when the alias did not move.
- ``serve-check`` (``python -m steps.serve_check``): the staged test split against the live
  endpoint; on a failure it moves the alias back (MLflow) and fails.
- ``rollback-apply`` / ``rollback-delete``: the service back on the version that held the
  alias before this run, or removed when there was none. Argo ends a DAG by its leaves
  (v4.0.5 workflow/controller/dag.go assessDAGPhase), and a Skipped leaf is not Completed
  (pkg/apis/workflow/v1alpha1/workflow_types.go NodePhase.Completed): it takes its
  parent's phase. After a failed check one rollback runs and the other is Skipped with
  serve-check's Failed, so the workflow ends Failed even when the rollback succeeded (and
  the exit handler ends the MLflow run FAILED); when the check passes both rollbacks are
  Omitted with its Succeeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from hera.workflows import Container, Resource, Task

from flows.container_step import container_step, file_output
from flows.deploy_step import deploy_templates
from flows.manifests.pod import OUTPUTS_DIR
from flows.parameters import input_ref
from steps.common.config import PipelineConfig


def _bench(name: str) -> str:
    return f"{{{{tasks.benchmark.outputs.parameters.{name}}}}}"


def promoted_when() -> str:
    """The ``when`` of deploy and serve-check: the benchmark moved the alias. A plain
    dependency on a Skipped task still runs (Argo and the local runner alike), so the
    check carries the same ``when`` and is Skipped with the deploy."""
    return f"{_bench('promoted')} == true"


class ServingTemplates(NamedTuple):
    deploy: Resource
    serve_check: Container
    rollback_apply: Resource
    rollback_delete: Resource


def serving_templates(cfg: PipelineConfig, settings: Sequence[str]) -> ServingTemplates:
    """The serving tasks' templates, inside the active workflow context."""
    deploy = deploy_templates(cfg, settings)
    args = ["--url", input_ref("url"), "--dataset", input_ref("dataset-uri")]
    args += ["--benchmark", input_ref("benchmark-uri"), "--mlflow-run-id", input_ref("run-id")]
    check = container_step(
        cfg,
        name="serve-check",
        image="serve",
        module="steps.serve_check",
        args=[*args, "--outputs-dir", OUTPUTS_DIR],
        settings=settings,
        inputs=["url", "dataset-uri", "benchmark-uri", "run-id"],
        # declared, so the outputs directory is the task's own in a local run too
        outputs=[file_output(n, n) for n in ("passed", "accuracy")],
    )
    return ServingTemplates(deploy.deploy, check, deploy.rollback_apply, deploy.rollback_delete)


def add_serving_tasks(
    cfg: PipelineConfig,
    templates: ServingTemplates,
    *,
    benchmark: Task,
    shared: dict[str, str],
    report_uri: str,
) -> None:
    """The serving tasks after ``benchmark``, inside the active DAG context; ``shared``:
    the dataset-uri and run-id arguments of every step."""
    version = _bench("model-version")
    model_uri = f"models:/{cfg.benchmark.registered_model}/{version}"
    when, run_id = promoted_when(), shared["run-id"]
    deploy = templates.deploy(
        name="deploy",
        when=when,
        arguments={"model-uri": model_uri, "run-id": run_id, "model-version": version},
    )
    url = "{{tasks.deploy.outputs.parameters.url}}"
    check_args = {**shared, "url": url, "benchmark-uri": report_uri}
    serve_check = templates.serve_check(name="serve-check", when=when, arguments=check_args)
    benchmark >> deploy >> serve_check
    # the rollbacks' edges are their `depends`: a failed check
    previous = _bench("previous-version")
    templates.rollback_apply(
        name="rollback-apply",
        depends="serve-check.Failed",
        when=f"'{previous}' != ''",
        arguments={"previous-version": previous, "run-id": run_id},
    )
    templates.rollback_delete(
        name="rollback-delete", depends="serve-check.Failed", when=f"'{previous}' == ''"
    )
