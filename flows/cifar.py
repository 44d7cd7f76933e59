"""The CIFAR-10 pipeline, defined once with Hera; rendered, submitted, scheduled or run here.

    python flows/cifar.py [--config F] [--set k=v ...] [-p name=value ...]   run it here
    python flows/cifar.py --render [--cron]           print the WorkflowTemplate and its run
    python flows/cifar.py --submit [--wait]           create/update the template, run it
    python flows/cifar.py --cron --submit             create/update the template and schedule
    python flows/cifar.py --resubmit WF [--dry-run]   a failed run again, reusing what it did
    python flows/cifar.py serve [--model URI]          serve the champion here (flows/cli/serve.py)

On a cluster the pipeline is the WorkflowTemplate ``cifar-pipeline`` (``build_template``):
the templates, the DAG, and the parameters of ``flows.pipeline.parameters`` with the
config's values as defaults; a Workflow (``build_submission``) or the CronWorkflow runs it
by ``workflowTemplateRef``; the local runner executes that same pair.

The DAG, in ``_define`` below: ``create-run`` (MLflow) and ``stage`` ->
``train`` (a PyTorchJob or a TrainJob; in the template a one-node ``train`` and a
``train-multinode`` PyTorchJob, picked by ``when``) -> ``optimize`` -> ``benchmark`` ->
``deploy`` (the InferenceService, when the benchmark moved the alias) -> ``serve-check``
(the live endpoint); a failed deploy or check runs the rollbacks. Stage, train, optimize
and benchmark are memoized (``memo_keys``): each is followed by ``<step>-reused``, the
check of a hit, and ``<step>-again``, the step run again when the hit's objects are gone
(``reuse_templates``); what reads a step's outputs reads the ones it handed on. The exit
handler runs ``close-run``, which ends the MLflow run with the workflow's status, and,
unless training succeeded, ``delete-train-job``. Each template family has its module in
``flows.pipeline``: ``mlflow_templates`` (create-run, close-run), ``stage_template``,
``train_templates`` (the jobs and their deletion), ``optimize_templates`` (optimize,
benchmark), ``serving_templates`` (deploy, serve-check, the rollbacks). One run at a time
holds the mutex ``cluster.mutex``. Every step gets the config as ``--set`` arguments
(``flows.manifests.shared_pod.config_args``); outputs are small files under /tmp/outputs read
back as output parameters; a run writes its objects under
``<storage.root_uri>/runs/<workflow name>`` (a hit's are an earlier run's).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from hera.workflows import DAG, Container, CronWorkflow, Parameter, Task, Workflow, WorkflowTemplate
from hera.workflows import models as m

from flows.manifests.names import APP, annotations, labels, run_root, workflow_url
from flows.pipeline import parameters
from flows.pipeline.memo_keys import MAX_AGE_INPUT, RUN_AGAIN
from flows.pipeline.mlflow_templates import RUN_ID_GLOBAL, close_run_template, create_run_template
from flows.pipeline.optimize_templates import DECISION, benchmark_template, optimize_template
from flows.pipeline.parameters import step_settings
from flows.pipeline.reuse_templates import RUN_OUTPUT, Reuse, reuse_check_template
from flows.pipeline.serving_templates import ServingTemplates, restore_template, serving_templates
from flows.pipeline.stage_template import stage_template
from flows.pipeline.template_fields import workflow_spec
from flows.pipeline.train_templates import delete_template, delete_when, train_templates
from steps.common.config import PipelineConfig

GENERATE_NAME = "cifar-"
TEMPLATE_NAME = APP  # the WorkflowTemplate every submission and schedule refers to
ENTRYPOINT = "pipeline"
EXIT_HANDLER = "exit-handler"
# the rollbacks' edges: a failed deploy or check, however it ended (a failure condition,
# a deadline, an Error)
ROLLBACK_DEPENDS = "deploy.Failed || deploy.Errored || serve-check.Failed || serve-check.Errored"


def _define(cfg: PipelineConfig, source_keys: bool = False) -> None:
    """The pipeline inside the active WorkflowTemplate: each template made once (Hera lists
    them in that order), the DAG that runs them, then the exit handler. ``source_keys``:
    the memo keys name each step's source instead of its image (a local run)."""
    settings = step_settings(cfg)
    argo_link = workflow_url(cfg, "{{workflow.namespace}}", "{{workflow.name}}")
    create_run = create_run_template(cfg, settings, argo_link)
    stage = stage_template(cfg, settings, source_keys=source_keys)
    trains = train_templates(cfg, settings, source_keys=source_keys)
    optimize = optimize_template(cfg, settings, source_keys=source_keys)
    benchmark = benchmark_template(cfg, settings, source_keys=source_keys)
    check = reuse_check_template(cfg, settings)
    serving = serving_templates(cfg, settings)

    # Where this run writes. What a step hands on is its output: on a memo hit, the URIs
    # of the earlier run that wrote them (flows/pipeline/reuse_templates.py), never these
    # recomputed.
    root = run_root(cfg)
    run_id = _output("create-run", "run-id")
    staged, trained = Reuse("stage", ("stage",)), Reuse("train", tuple(t.name for t, _ in trains))
    optimized, benchmarked = Reuse("optimize", ("optimize",)), Reuse("benchmark", ("benchmark",))
    dataset = {"dataset-uri": staged.output("dataset-uri"), "run-id": run_id}
    model = {**dataset, "model-uri": trained.output("model-uri")}
    measured = {**model, "optimized-uri": optimized.output("optimized")}
    memo = {"check": check, "run_id": run_id}

    with DAG(name=ENTRYPOINT):
        run_task = create_run(name="create-run")
        stage_ends = _reusable(
            staged, [(stage, None)], {}, **memo, reused=["dataset-uri"], waits=[run_task]
        )
        # One training template runs, the others are Skipped: a plain dependency on each holds.
        train_ends = _reusable(
            trained,
            trains,
            {**dataset, "model-uri": f"{root}/model"},
            **memo,
            reused=["model-uri", RUN_OUTPUT],
            after=[run_task, *stage_ends],
        )
        optimize_ends = _reusable(
            optimized,
            [(optimize, None)],
            {**model, "optimized-uri": f"{root}/optimized"},
            **memo,
            reused=["optimized", RUN_OUTPUT],
            after=train_ends,
        )
        benchmark_ends = _reusable(
            benchmarked,
            [(benchmark, None)],
            {**measured, "output-uri": f"{root}/benchmark"},
            **memo,
            reused=["report-uri", *DECISION, RUN_OUTPUT],
            after=optimize_ends,
        )
        if cfg.serving.enabled:  # a transaction (flows/pipeline/serving_templates.py)
            _serve(cfg, serving, benchmarked, benchmark_ends, dataset)

    close_run = close_run_template(cfg, settings, argo_link)
    delete_job = delete_template(cfg)
    run_global = f"{{{{workflow.outputs.parameters.{RUN_ID_GLOBAL}}}}}"
    restore = restore_template(cfg, settings, run_global) if cfg.serving.enabled else None
    with DAG(name=EXIT_HANDLER):  # run whatever happened
        close_run(name="close-run")
        # training did not succeed (its job failed, or `argo stop` stopped it): its pods
        # free their GPUs now, before the workflow's TTL would take the job with it
        delete_job(name="delete-train-job", when=delete_when())
        # a stopped run restores the champion (flows/pipeline/serving_templates.py)
        if restore is not None:
            _restore_champion(serving, restore, run_global)


def _restore_champion(serving: ServingTemplates, restore: Container, run_id: str) -> None:
    """In the exit handler, for a run that did not succeed: the alias back if this run moved
    it and its check never passed (``argo stop`` skipped the rollbacks), then the service
    back on the version before, or deleted after a first deployment."""
    restore(name="restore-champion", when="{{workflow.status}} != Succeeded")
    again = f"{_output('restore-champion', 'restore-service')} == true"
    previous = _output("restore-champion", "previous-version")
    done = "restore-champion.Succeeded"
    serving.rollback_apply(
        name="restore-apply",
        depends=done,
        when=f"{again} && '{previous}' != ''",
        arguments={
            "previous-version": previous,
            "run-id": run_id,
            "previous-serving-image": _output("restore-champion", "previous-serving-image"),
        },
    )
    deleted = f"{again} && '{previous}' == ''"
    serving.rollback_delete(name="restore-delete", depends=done, when=deleted)


def _reusable(
    reuse: Reuse,
    runs: list[tuple[Any, str | None]],
    arguments: dict[str, str],
    *,
    check: Any,
    run_id: str,
    reused: list[str],
    after: Sequence[Task] = (),
    waits: Sequence[Task] = (),
) -> list[Task]:
    """A memoized step's tasks (flows/pipeline/reuse_templates.py): each template after
    ``after``, the check of a hit (after ``waits`` too), each template again after a dead
    one. Returns the tasks a reader of its outputs depends on."""
    ran = [template(name=template.name, when=when, arguments=arguments) for template, when in runs]
    checked = check(
        name=reuse.check, when=reuse.check_when, arguments=reuse.check_arguments(reused, run_id)
    )
    again = {**arguments, MAX_AGE_INPUT: RUN_AGAIN}  # the entry is too old: run, overwrite it
    agains = [
        template(name=reuse.again(template.name), when=reuse.again_when(when), arguments=again)
        for template, when in runs
    ]
    _after(after, ran)
    _after([*ran, *waits], [checked])
    _after([checked], agains)
    return [*ran, *agains]


def _after(upstream: Sequence[Task], downstream: Sequence[Task]) -> None:
    """Every task of ``downstream`` depends on every one of ``upstream``."""
    for task in downstream:
        if upstream:
            list(upstream) >> task  # type: ignore[operator]


def _serve(
    cfg: PipelineConfig,
    serving: ServingTemplates,
    benchmarked: Reuse,
    ends: Sequence[Task],
    dataset: dict[str, str],
) -> None:
    """deploy and serve-check after the benchmark, on its decision (the one a hit reused),
    and the rollbacks of either."""
    version, previous = benchmarked.output("model-version"), benchmarked.output("previous-version")
    run_id = dataset["run-id"]
    # deploy and serve-check run when the benchmark moved the alias: a plain dependency on
    # a Skipped task still runs (Argo and the local runner alike), so the check carries the
    # same `when` and is Skipped with the deploy
    promoted = f"{benchmarked.output('promoted')} == true"
    model_uri = f"models:/{cfg.benchmark.registered_model}/{version}"
    deployed = {
        "model-uri": model_uri,
        "run-id": run_id,
        "model-version": version,
        "serving-image": benchmarked.output("serving-image"),
    }
    report = benchmarked.output("report-uri")
    checked = {**dataset, "url": _output("deploy", "url"), "benchmark-uri": report}
    reason = (
        f"the deployment of v{version} failed (deploy {{{{tasks.deploy.status}}}}, "
        "or its live check) in workflow {{workflow.name}}"
    )
    undone = {"version": version, "previous-version": previous, "reason": reason, "run-id": run_id}
    deploy = serving.deploy(name="deploy", when=promoted, arguments=deployed)
    check = serving.serve_check(name="serve-check", when=promoted, arguments=checked)
    _after(ends, [deploy])
    deploy >> check  # type: ignore[operator]
    # the rollbacks' edges are their `depends`: deploy or serve-check failed
    serving.rollback_alias(name="rollback-alias", depends=ROLLBACK_DEPENDS, arguments=undone)
    serving.rollback_apply(
        name="rollback-apply",
        depends=ROLLBACK_DEPENDS,
        when=f"'{previous}' != ''",
        arguments={
            "previous-version": previous,
            "run-id": run_id,
            "previous-serving-image": benchmarked.output("previous-serving-image"),
        },
    )
    serving.rollback_delete(
        name="rollback-delete", depends=ROLLBACK_DEPENDS, when=f"'{previous}' == ''"
    )


def _output(task: str, name: str) -> str:
    return f"{{{{tasks.{task}.outputs.parameters.{name}}}}}"


def build_template(
    cfg: PipelineConfig, *, git_revision: str | None = None, source_keys: bool = False
) -> WorkflowTemplate:
    """The WorkflowTemplate ``cifar-pipeline``: templates, DAG and the parameters a run may
    change, defaulting to this config's values; pure. ``source_keys``: memo keys name
    each step's source, not its image (flows/pipeline/memo_keys.py; a local run)."""
    spec = workflow_spec(cfg, git_revision, entrypoint=ENTRYPOINT, on_exit=EXIT_HANDLER)
    metadata = m.WorkflowMetadata(labels=spec["labels"], annotations=spec["annotations"])
    arguments = [
        Parameter(name=p.name, value=value, description=p.description)
        for p, value in zip(parameters.PARAMETERS, parameters.defaults(cfg).values(), strict=True)
    ]
    with WorkflowTemplate(
        name=TEMPLATE_NAME, arguments=arguments, workflow_metadata=metadata, **spec
    ) as template:
        _define(cfg, source_keys)
    return template


def _arguments(values: dict[str, str] | None) -> list[Parameter] | None:
    return [Parameter(name=k, value=v) for k, v in (values or {}).items()] or None


def build_submission(
    cfg: PipelineConfig, values: dict[str, str] | None = None, *, git_revision: str | None = None
) -> Workflow:
    """A run of the WorkflowTemplate with the given parameter values (the rest default)."""
    return Workflow(
        generate_name=GENERATE_NAME,
        namespace=cfg.cluster.namespace,
        labels=labels(cfg),
        annotations=annotations(cfg, git_revision),
        workflow_template_ref=m.WorkflowTemplateRef(name=TEMPLATE_NAME),
        arguments=_arguments(values),
    )


def build_cron_workflow(
    cfg: PipelineConfig, values: dict[str, str] | None = None, *, git_revision: str | None = None
) -> CronWorkflow:
    """The WorkflowTemplate on ``schedule.cron``; each run carries the workflow's labels."""
    s, marks = cfg.schedule, {"labels": labels(cfg), "annotations": annotations(cfg, git_revision)}
    return CronWorkflow(
        name=s.name,
        namespace=cfg.cluster.namespace,
        **marks,
        schedules=[s.cron],
        timezone=s.timezone,
        concurrency_policy=s.concurrency_policy,
        starting_deadline_seconds=s.starting_deadline_seconds,
        successful_jobs_history_limit=s.successful_history_limit,
        failed_jobs_history_limit=s.failed_history_limit,
        workflow_metadata=m.WorkflowMetadata(**marks),
        workflow_template_ref=m.WorkflowTemplateRef(name=TEMPLATE_NAME),
        arguments=_arguments(values),
    )


def render(*documents: Workflow | WorkflowTemplate | CronWorkflow) -> str:
    """The YAML ``--render`` prints (what ``--submit`` sends): one document each."""
    return "---\n".join(doc.to_yaml() for doc in documents)


if __name__ == "__main__":
    from flows.cli.main import main

    # This module's own builders: the CLI imports no flows.cifar, which would run this
    # file a second time as another module.
    raise SystemExit(main(sys.argv[1:], sys.modules[__name__]))
