"""The pipeline's last tasks: ship the champion the benchmark promoted, check it live, and
undo both if either fails: deploy is a transaction.

    benchmark --(promoted == true)--> deploy --> serve-check
        deploy or serve-check Failed / Errored --> rollback-alias
                                              \\-> rollback-apply  (a previous version)
                                              \\-> rollback-delete (a first deployment)

- ``deploy`` (flows/deploy_step.py): applies the InferenceService for the registry version
  the benchmark registered; fails on a failed rollout or at ``serving.ready_timeout_s``.
  On a re-apply Argo reads the previous version's Ready at once, so its success proves
  little: the check is the gate.
- ``serve-check`` (``python -m steps.serve_check``): waits up to ``serving.ready_timeout_s``
  for the endpoint to serve the promoted version, then checks the staged test split
  against it; a verdict against it moves the alias back and exits 3, which is final (a
  wrong version or accuracy is not retried); what is no answer is retried, and a retry
  never passes once the alias went back.
- ``rollback-alias`` (``python -m steps.serve_check.rollback``): the alias back from this
  run's version to the one before it, whatever ended deploy or serve-check (a failure
  condition, a deadline, an Error); after serve-check's own rollback it finds the alias
  already back and moves nothing, so the alias moves back once.
- ``rollback-apply`` / ``rollback-delete``: the service back on the version that held the
  alias before this run, or removed when there was none.

So a run ends with the alias and the served version agreeing: Succeeded serves the new
version; a failed deploy or check serves the previous one (or nothing after a first
deployment). The run ends Failed then: Argo ends a DAG by its leaves (v4.0.5
workflow/controller/dag.go assessDAGPhase), and a Skipped leaf is not Completed
(pkg/apis/workflow/v1alpha1/workflow_types.go NodePhase.Completed): it takes the phase of
the branch that reached it. One of the two service rollbacks is always Skipped, reached
from the failed deploy or check, so the workflow ends Failed even when every rollback
succeeded (and the exit handler ends the MLflow run FAILED); when the check passes all
three rollbacks are Omitted with its Succeeded.
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

# serve-check's exits that a retry would only repeat or overturn: 2 a user error,
# 3 the endpoint's verdict (steps.serve_check.step.VERDICT_EXIT; not imported here:
# rendering must not load mlflow)
CHECK_FINAL_EXITS = (2, 3)
ROLLBACK_DEPENDS = "deploy.Failed || deploy.Errored || serve-check.Failed || serve-check.Errored"


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
    rollback_alias: Container
    rollback_apply: Resource
    rollback_delete: Resource


def serving_templates(cfg: PipelineConfig, settings: Sequence[str]) -> ServingTemplates:
    """The serving tasks' templates, inside the active workflow context."""
    deploy = deploy_templates(cfg, list(settings))
    args = ["--url", input_ref("url"), "--dataset", input_ref("dataset-uri")]
    args += ["--benchmark", input_ref("benchmark-uri"), "--mlflow-run-id", input_ref("run-id")]
    args += ["--wait-s", f"{cfg.serving.ready_timeout_s:g}"]  # deploy's deadline too
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
        final_exit_codes=CHECK_FINAL_EXITS,
    )
    alias = container_step(
        cfg,
        name="rollback-alias",
        image="serve",
        module="steps.serve_check.rollback",
        args=[
            *("--version", input_ref("version")),
            *("--previous-version", input_ref("previous-version")),
            *("--reason", input_ref("reason"), "--mlflow-run-id", input_ref("run-id")),
        ],
        settings=settings,
        inputs=["version", "previous-version", "reason", "run-id"],
        tracking=True,  # a small registry call: the bookkeeping steps' resources
    )
    return ServingTemplates(
        deploy.deploy, check, alias, deploy.rollback_apply, deploy.rollback_delete
    )


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
    # the rollbacks' edges are their `depends`: a failed deploy or check, however it ended
    previous = _bench("previous-version")
    reason = (
        f"the deployment of v{version} failed (deploy {{{{tasks.deploy.status}}}}, "
        "or its live check) in workflow {{workflow.name}}"
    )
    templates.rollback_alias(
        name="rollback-alias",
        depends=ROLLBACK_DEPENDS,
        arguments={
            "version": version,
            "previous-version": previous,
            "reason": reason,
            "run-id": run_id,
        },
    )
    templates.rollback_apply(
        name="rollback-apply",
        depends=ROLLBACK_DEPENDS,
        when=f"'{previous}' != ''",
        arguments={"previous-version": previous, "run-id": run_id},
    )
    templates.rollback_delete(
        name="rollback-delete", depends=ROLLBACK_DEPENDS, when=f"'{previous}' == ''"
    )
