"""The CIFAR-10 pipeline, defined once with Hera; rendered, submitted, scheduled or run here.

    python flows/cifar.py [--config F] [--set k=v ...] [-p name=value ...]   run it here
    python flows/cifar.py --render [--cron]           print the WorkflowTemplate and its run
    python flows/cifar.py --submit [--wait]           create/update the template, run it
    python flows/cifar.py --cron --submit             create/update the template and schedule
    python flows/cifar.py serve [--model URI]          serve the champion here (flows.cli)

On a cluster the pipeline is the WorkflowTemplate ``cifar-pipeline`` (``build_template``):
the templates, the DAG, and the parameters of ``flows.parameters`` with the config's values
as defaults; a Workflow (``build_submission``) or the CronWorkflow runs it by
``workflowTemplateRef``; the local runner executes that same pair.

The DAG, in ``_define`` below: ``create-run`` (MLflow) and ``stage`` (memoized) ->
``train`` (a PyTorchJob or a TrainJob; in the template a one-node ``train`` and a
``train-multinode`` PyTorchJob, picked by ``when``) -> ``optimize`` -> ``benchmark`` ->
``deploy`` (the InferenceService, when the benchmark moved the alias) -> ``serve-check``
(the live endpoint); a failed deploy or check runs the rollbacks. The exit handler runs
``close-run``, which ends the MLflow run with the workflow's status, and, unless training
succeeded, ``delete-train-job``. Each template family has its module: ``tracking_step``
(create-run, close-run), ``stage_step``, ``train_step`` (the jobs and their deletion),
``optimize_step`` (optimize, benchmark), ``serving_step`` (deploy, serve-check, the
rollbacks). One run at a time holds the mutex ``cluster.mutex``. Every step gets the config
as ``--set`` arguments (``flows.manifests.pod.config_args``); outputs are small files under
/tmp/outputs read back as output parameters; objects live under
``<storage.root_uri>/runs/<workflow name>``.
"""

from __future__ import annotations

import sys
from typing import Any

from hera.workflows import DAG, Container, CronWorkflow, Parameter, Workflow, WorkflowTemplate
from hera.workflows import models as m

from flows import parameters
from flows.manifests.names import APP, annotations, labels, run_root, workflow_url
from flows.manifests.pod import DATA_VOLUME, ISTIO_INJECT, pod_security
from flows.optimize_step import benchmark_template, optimize_template
from flows.parameters import step_settings
from flows.serving_step import ServingTemplates, restore_template, serving_templates
from flows.stage_step import stage_template
from flows.tracking_step import RUN_ID_GLOBAL, close_run_template, create_run_template
from flows.train_step import delete_template, delete_when, train_templates
from steps.common.config import PipelineConfig

GENERATE_NAME = "cifar-"
TEMPLATE_NAME = APP  # the WorkflowTemplate every submission and schedule refers to
ENTRYPOINT = "pipeline"
EXIT_HANDLER = "exit-handler"
# the rollbacks' edges: a failed deploy or check, however it ended (a failure condition,
# a deadline, an Error)
ROLLBACK_DEPENDS = "deploy.Failed || deploy.Errored || serve-check.Failed || serve-check.Errored"


def _define(cfg: PipelineConfig) -> None:
    """The pipeline inside the active WorkflowTemplate: each template made once (Hera lists
    them in that order), the DAG that runs them, then the exit handler."""
    settings = step_settings(cfg)
    argo_link = workflow_url(cfg, "{{workflow.namespace}}", "{{workflow.name}}")
    create_run = create_run_template(cfg, settings, argo_link)
    stage = stage_template(cfg, settings)
    trains = train_templates(cfg, settings)
    optimize = optimize_template(cfg, settings)
    benchmark = benchmark_template(cfg, settings)
    serving = serving_templates(cfg, settings)

    # what the tasks pass on: the run's paths and id, the benchmark's decision
    root = run_root(cfg)
    model = {"model-uri": f"{root}/model"}
    optimized = {**model, "optimized-uri": f"{root}/optimized"}
    report_uri = f"{root}/benchmark"
    run_id = _output("create-run", "run-id")
    shared = {"dataset-uri": _output("stage", "dataset-uri"), "run-id": run_id}
    version = _output("benchmark", "model-version")
    previous = _output("benchmark", "previous-version")
    # deploy and serve-check run when the benchmark moved the alias: a plain dependency on
    # a Skipped task still runs (Argo and the local runner alike), so the check carries the
    # same `when` and is Skipped with the deploy
    promoted = f"{_output('benchmark', 'promoted')} == true"
    model_uri = f"models:/{cfg.benchmark.registered_model}/{version}"
    deployed = {"model-uri": model_uri, "run-id": run_id, "model-version": version}
    checked = {**shared, "url": _output("deploy", "url"), "benchmark-uri": report_uri}
    reason = (
        f"the deployment of v{version} failed (deploy {{{{tasks.deploy.status}}}}, "
        "or its live check) in workflow {{workflow.name}}"
    )
    undone = {"version": version, "previous-version": previous, "reason": reason, "run-id": run_id}

    with DAG(name=ENTRYPOINT):
        run_task, stage_task = create_run(name="create-run"), stage(name="stage")
        # One training template runs, the others are Skipped: a plain dependency on each holds.
        train_tasks = [
            train(name=train.name, when=when, arguments={**shared, **model})
            for train, when in trains
        ]
        optimize_task = optimize(name="optimize", arguments={**shared, **optimized})
        benchmark_task = benchmark(
            name="benchmark", arguments={**shared, **optimized, "output-uri": report_uri}
        )
        for train_task in train_tasks:
            [run_task, stage_task] >> train_task >> optimize_task
        optimize_task >> benchmark_task
        if cfg.serving.enabled:  # deploy is a transaction (flows/serving_step.py)
            deploy = serving.deploy(name="deploy", when=promoted, arguments=deployed)
            check = serving.serve_check(name="serve-check", when=promoted, arguments=checked)
            benchmark_task >> deploy >> check
            # the rollbacks' edges are their `depends`: deploy or serve-check failed
            serving.rollback_alias(
                name="rollback-alias", depends=ROLLBACK_DEPENDS, arguments=undone
            )
            serving.rollback_apply(
                name="rollback-apply",
                depends=ROLLBACK_DEPENDS,
                when=f"'{previous}' != ''",
                arguments={"previous-version": previous, "run-id": run_id},
            )
            serving.rollback_delete(
                name="rollback-delete", depends=ROLLBACK_DEPENDS, when=f"'{previous}' == ''"
            )

    close_run = close_run_template(cfg, settings, argo_link)
    delete_job = delete_template(cfg)
    run_global = f"{{{{workflow.outputs.parameters.{RUN_ID_GLOBAL}}}}}"
    restore = restore_template(cfg, settings, run_global) if cfg.serving.enabled else None
    with DAG(name=EXIT_HANDLER):  # run whatever happened
        close_run(name="close-run")
        # training did not succeed (its job failed, or `argo stop` stopped it): its pods
        # free their GPUs now, before the workflow's TTL would take the job with it
        delete_job(name="delete-train-job", when=delete_when())
        if restore is not None:  # a stopped run restores the champion (flows/serving_step.py)
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
        arguments={"previous-version": previous, "run-id": run_id},
    )
    deleted = f"{again} && '{previous}' == ''"
    serving.rollback_delete(name="restore-delete", depends=done, when=deleted)


def _output(task: str, name: str) -> str:
    return f"{{{{tasks.{task}.outputs.parameters.{name}}}}}"


def _spec(cfg: PipelineConfig, git_revision: str | None) -> dict[str, Any]:
    """Workflow-level fields of the WorkflowTemplate (labels and annotations also the
    CronWorkflow's)."""
    c = cfg.cluster
    pod_notes = {} if c.istio_inject else {ISTIO_INJECT: "false"}
    spec: dict[str, Any] = dict(
        namespace=c.namespace,
        entrypoint=ENTRYPOINT,
        on_exit=EXIT_HANDLER,
        service_account_name=c.service_account,
        labels=labels(cfg),
        annotations=annotations(cfg, git_revision),
        pod_metadata=m.Metadata(labels=labels(cfg), annotations=pod_notes or None),
        security_context=m.PodSecurityContext.model_validate(pod_security(cfg)),
        ttl_strategy=m.TTLStrategy(
            seconds_after_success=c.ttl_after_success_s,
            seconds_after_failure=c.ttl_after_failure_s,
        ),
        pod_gc=m.PodGC(strategy=c.pod_gc),
        # every pod's log to the artifact repository: it outlives the workflow's TTL
        archive_logs=True,
        # the GC pod of the report artifacts runs as the workflow's service account; a
        # failed GC leaves the objects, never a workflow stuck on its finalizer
        artifact_gc=m.WorkflowLevelArtifactGC(
            service_account_name=c.service_account, force_finalizer_removal=True
        ),
    )
    if c.mutex:  # a scheduled and a manual run never overlap (no ConfigMap needed)
        spec["synchronization"] = m.Synchronization(mutexes=[m.Mutex(name=c.mutex)])
    if c.pvc:
        claim = m.PersistentVolumeClaimVolumeSource(claim_name=c.pvc)
        spec["volumes"] = [m.Volume(name=DATA_VOLUME, persistent_volume_claim=claim)]
    return spec


def build_template(cfg: PipelineConfig, *, git_revision: str | None = None) -> WorkflowTemplate:
    """The WorkflowTemplate ``cifar-pipeline``: templates, DAG and the parameters a run may
    change, defaulting to this config's values; pure."""
    spec = _spec(cfg, git_revision)
    metadata = m.WorkflowMetadata(labels=spec["labels"], annotations=spec["annotations"])
    arguments = [
        Parameter(name=p.name, value=value, description=p.description)
        for p, value in zip(parameters.PARAMETERS, parameters.defaults(cfg).values(), strict=True)
    ]
    with WorkflowTemplate(
        name=TEMPLATE_NAME, arguments=arguments, workflow_metadata=metadata, **spec
    ) as template:
        _define(cfg)
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
    s, spec = cfg.schedule, _spec(cfg, git_revision)
    return CronWorkflow(
        name=s.name,
        namespace=cfg.cluster.namespace,
        labels=spec["labels"],
        annotations=spec["annotations"],
        schedules=[s.cron],
        timezone=s.timezone,
        concurrency_policy=s.concurrency_policy,
        starting_deadline_seconds=s.starting_deadline_seconds,
        successful_jobs_history_limit=s.successful_history_limit,
        failed_jobs_history_limit=s.failed_history_limit,
        workflow_metadata=m.WorkflowMetadata(
            labels=spec["labels"], annotations=spec["annotations"]
        ),
        workflow_template_ref=m.WorkflowTemplateRef(name=TEMPLATE_NAME),
        arguments=_arguments(values),
    )


def render(*documents: Workflow | WorkflowTemplate | CronWorkflow) -> str:
    """The YAML ``--render`` prints (what ``--submit`` sends): one document each."""
    return "---\n".join(doc.to_yaml() for doc in documents)


if __name__ == "__main__":
    from flows.cli import main

    # This module's own builders: the CLI imports no flows.cifar, which would run this
    # file a second time as another module.
    raise SystemExit(main(sys.argv[1:], sys.modules[__name__]))
