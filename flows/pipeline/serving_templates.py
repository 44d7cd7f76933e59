"""The serving templates: ship the champion the benchmark promoted, check it live, and undo
both if either fails: deploy is a transaction (flows/cifar.py's DAG wires them).

    benchmark --(promoted == true)--> deploy --> serve-check
        deploy or serve-check Failed / Errored --> rollback-alias
                                              \\-> rollback-apply  (a previous version)
                                              \\-> rollback-delete (a first deployment)

- ``deploy``: ``kubectl apply`` of the champion's InferenceService
  (flows/manifests/inferenceservice.py) for the ``model-uri`` input (labelled with the
  MLflow ``run-id`` and the ``model-version``), run by the ``serving-image`` the benchmark
  chose for it (cifar-serve, or cifar-optimize for a torch champion); it succeeds when the
  service is Ready and fails on a failed rollout or at its deadline,
  ``serving.ready_timeout_s``; its outputs are the in-cluster ``url``
  (``status.address.url``) and the ``external-url`` (``status.url``). No ownerReference:
  the service outlives the workflow.
- ``serve-check`` (``python -m steps.serve_check``): waits up to ``serving.ready_timeout_s``
  for the endpoint to serve the promoted version, then checks the staged test split
  against it; a verdict against it moves the alias back and exits 3, which is final (a
  wrong version or accuracy is not retried); what is no answer is retried, and a retry
  never passes once the alias went back.
- ``rollback-alias`` (``python -m steps.serve_check.rollback``): the alias back from this
  run's version to the one before it, whatever ended deploy or serve-check (a failure
  condition, a deadline, an Error); after serve-check's own rollback it finds the alias
  already back and moves nothing, so the alias moves back once.
- ``rollback-apply``: the same service for the registry version ``previous-version``, in
  its own image (``previous-serving-image``);
  ``rollback-delete``: deletes the service (a first deployment that failed).

So a run ends with the alias and the served version agreeing: Succeeded serves the new
version; a failed deploy or check serves the previous one (or nothing after a first
deployment). The run ends Failed then: Argo ends a DAG by its leaves (v4.0.5
workflow/controller/dag.go assessDAGPhase), and a Skipped leaf is not Completed
(pkg/apis/workflow/v1alpha1/workflow_types.go NodePhase.Completed): it takes the phase of
the branch that reached it. One of the two service rollbacks is always Skipped, reached
from the failed deploy or check, so the workflow ends Failed even when every rollback
succeeded (and the exit handler ends the MLflow run FAILED); when the check passes all
three rollbacks are Omitted with its Succeeded.

A stopped run ends agreeing too. ``argo stop`` runs only the exit handler's pods (Argo
v4.0.5 pkg/apis/workflow/v1alpha1/workflow_types.go ``ShutdownStrategy.ShouldExecute``;
workflow/controller/workflowpod.go ``createWorkflowPod`` fails every other node without a
pod, so the rollbacks never run), and a local run's Ctrl-C is ``argo stop``. The exit
handler's ``restore-champion`` (``restore_template``: ``python -m
steps.serve_check.restore``) puts the alias back when this run moved it and its check never
passed, and ``restore-apply`` / ``restore-delete`` (the rollbacks' templates) put the
service back. ``argo terminate`` runs nothing, the exit handler neither: the next run's
benchmark puts the alias back before it decides (steps/benchmark/previous.py).

Argo (v4.0.5 workflow/executor/resource.go) runs an apply as ``kubectl apply -f manifest
-o json``, then GETs the object at once and every 5 s after until a condition holds
(WaitResource: ``wait.PollUntilContextCancel(ctx, 5s, true, ...)``, immediate;
matchConditions: any failure requirement fails the step, all success requirements
succeed it), then ``kubectl get -o jsonpath`` for each output (SaveResourceParameters).

Where the conditions look: KServe v0.19.0 keeps ``status.conditions`` sorted by type
(knative.dev/pkg apis/condition_set.go SetCondition sorts them). A Standard-mode service
carries exactly IngressReady, PredictorReady, Ready (the living condition set of
pkg/apis/serving/v1beta1/inference_service_status.go, initialised before any status write
by controller.go Reconcile) and Stopped (set by Reconcile after the components): so Ready
is at index 2 and PredictorReady at index 1. A label selector cannot search a list.

Known limit: Argo's first GET comes right after the apply, before KServe has reconciled
the new spec, so on a re-apply over a service that was Ready (a new champion, a rollback)
it reads the previous version's Ready and succeeds; the conditions cannot compare
generations (KServe's status.observedGeneration is its Deployment's). So ``serve-check``
is the gate: it waits up to ``serving.ready_timeout_s`` (this step's deadline too) for the
endpoint to serve the version deployed, and a failure of either step rolls back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import yaml
from hera.workflows import Artifact, Container, Parameter, RawArtifact, Resource
from hera.workflows import models as m

from flows.manifests import inferenceservice as isvc
from flows.manifests.names import APP
from flows.manifests.shared_pod import OUTPUTS_DIR
from flows.pipeline.parameters import input_ref
from flows.pipeline.step_template import container_step, file_output
from steps.common.config import PipelineConfig

MANIFEST_PATH = "/tmp/manifest.yaml"
RESOURCE = "inferenceservices.serving.kserve.io"  # kubectl's name of the kind
READY_AT = 2  # IngressReady, PredictorReady, Ready, Stopped
PREDICTOR_AT = 1
SUCCESS = f"status.conditions.{READY_AT}.type == Ready, status.conditions.{READY_AT}.status == True"
# A failed rollout, as KServe v0.19.0 reports it: PropagateRawStatus
# (inference_service_status.go) copies the predictor Deployment's conditions into
# PredictorReady: ReplicaFailure True (reason FailedCreate: its pods are refused, e.g. by
# quota or pod security; kubernetes pkg/controller/replicaset calculateStatus, copied by
# deployment/progress.go getReplicaFailures) wins over all; Progressing False
# (ProgressDeadlineExceeded, kubernetes deployment/util TimedOutReason, after the
# Deployment's progressDeadlineSeconds, 600 s: KServe's deployment_reconciler.go
# setDefaultDeploymentSpec) shows while the previous pods stay Available (while none is,
# Available False's MinimumReplicasUnavailable wins, as during every first rollout: no
# failure).
# Not read: modelStatus's FailedToLoad (PropagateModelStatus). KServe reconciles a pod's
# change only when its init containers' statuses change (controller.go
# podInitContainersPredicate; this predictor has none), so a crash-looping kserve-container
# is read only at a reconcile the Deployment starts (its progress deadline), from
# podList.Items[0] in no set order; and a FailedToLoad so written stays in the status that
# Argo's first GET after a later apply reads. A crash-looping first deployment, and pods
# that never start (no node fits), are therefore learnt of by the step's deadline,
# serving.ready_timeout_s; a crash-looping update by serve-check, which waits as long for
# the new version, or by ProgressDeadlineExceeded.
FAILURE = f"status.conditions.{PREDICTOR_AT}.reason in (FailedCreate, ProgressDeadlineExceeded)"
# serve-check's exits that a retry would only repeat or overturn: 2 a user error,
# 3 the endpoint's verdict (steps.serve_check.step.VERDICT_EXIT; not imported here:
# rendering must not load mlflow)
CHECK_FINAL_EXITS = (2, 3)


class ServingTemplates(NamedTuple):
    deploy: Resource
    serve_check: Container
    rollback_alias: Container
    rollback_apply: Resource
    rollback_delete: Resource


def deadline_s(cfg: PipelineConfig) -> int:
    return math.ceil(cfg.serving.ready_timeout_s)


def manifest(
    cfg: PipelineConfig, settings: list[str], *, model_uri: str, version: str, image: str
) -> str:
    service_labels = {isvc.RUN_LABEL: input_ref("run-id"), isvc.VERSION_LABEL: version}
    data = isvc.build_inferenceservice(
        cfg, model_uri=model_uri, labels=service_labels, settings=settings, image=image
    )
    return yaml.safe_dump(data, sort_keys=False)


def _apply(
    cfg: PipelineConfig,
    *,
    name: str,
    text: str,
    inputs: list[str],
    failure: str | None,
    outputs: list[Parameter] | None,
) -> Resource:
    """The manifest as a raw input artifact, as train carries its job
    (flows/pipeline/train_templates.py)."""
    params: list[Parameter | Artifact] = [Parameter(name=n) for n in inputs]
    params.append(RawArtifact(name="manifest", path=MANIFEST_PATH, data=text))
    return Resource(
        name=name,
        action="apply",  # no owner: the service outlives the workflow
        success_condition=SUCCESS,
        failure_condition=failure,
        inputs=params,
        manifest_from=m.ManifestFrom(artifact=m.Artifact(name="manifest")),
        outputs=outputs,
        active_deadline_seconds=deadline_s(cfg),
        labels={f"{APP}/step": name},
    )


def serving_templates(cfg: PipelineConfig, settings: Sequence[str]) -> ServingTemplates:
    """The five templates, inside the active workflow context. ``settings``: every step's
    ``--set`` arguments (the server keeps its sections); the manifests are
    ``manifestFrom`` raw artifacts."""
    urls = [
        Parameter(name="url", value_from=m.ValueFrom(json_path="{.status.address.url}")),
        Parameter(name="external-url", value_from=m.ValueFrom(json_path="{.status.url}")),
    ]
    deploy = _apply(
        cfg,
        name="deploy",
        text=manifest(
            cfg,
            list(settings),
            model_uri=input_ref("model-uri"),
            version=input_ref("model-version"),
            image=input_ref("serving-image"),
        ),
        inputs=["model-uri", "run-id", "model-version", "serving-image"],
        failure=FAILURE,
        outputs=urls,
    )
    previous = input_ref("previous-version")
    # No failure condition: a rollback follows a failed rollout, whose failure the status
    # still shows when Argo first reads it; the rollback is done when Ready, or at the
    # deadline.
    rollback_apply = _apply(
        cfg,
        name="rollback-apply",
        text=manifest(
            cfg,
            list(settings),
            model_uri=f"models:/{cfg.benchmark.registered_model}/{previous}",
            version=previous,
            image=input_ref("previous-serving-image"),
        ),
        inputs=["previous-version", "run-id", "previous-serving-image"],
        failure=None,
        outputs=None,
    )
    rollback_delete = _delete(cfg)
    # Hera lists templates in the order they are made: the resources, then the containers.
    check, alias = _serve_check(cfg, settings), _rollback_alias(cfg, settings)
    return ServingTemplates(deploy, check, alias, rollback_apply, rollback_delete)


def _delete(cfg: PipelineConfig) -> Resource:
    """Deletes the service by name: Argo runs ``kubectl delete --ignore-not-found <flags>
    -o name`` (v4.0.5 resource.go getKubectlArguments), so a service already gone is no
    error. kubectl then waits for it to go (KServe's finalizer) and, if it may not watch,
    stops waiting without failing (kubectl delete.go DeleteResult ignores Forbidden)."""
    return Resource(
        name="rollback-delete",
        action="delete",
        flags=[RESOURCE, cfg.serving.name],
        active_deadline_seconds=deadline_s(cfg),
        labels={f"{APP}/step": "rollback-delete"},
    )


def _serve_check(cfg: PipelineConfig, settings: Sequence[str]) -> Container:
    args = ["--url", input_ref("url"), "--dataset", input_ref("dataset-uri")]
    args += ["--benchmark", input_ref("benchmark-uri"), "--mlflow-run-id", input_ref("run-id")]
    args += ["--wait-s", f"{cfg.serving.ready_timeout_s:g}"]  # deploy's deadline too
    return container_step(
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


def _rollback_alias(cfg: PipelineConfig, settings: Sequence[str]) -> Container:
    return container_step(
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


REASON = "workflow {{workflow.name}} ended {{workflow.status}} before its live check passed"


def restore_template(cfg: PipelineConfig, settings: Sequence[str], run_id: str) -> Container:
    """``restore-champion``, in the exit handler: the alias back when this run moved it and
    its live check never passed (a stopped run); its outputs say whether the service goes
    back too (``restore-service``), to which version (``previous-version``) and its image
    (``previous-serving-image``). ``run_id``:
    the pipeline's MLflow run, the exit handler's global. The defaults stand when it is
    Skipped (a run that succeeded)."""
    outputs = [
        Parameter(
            name=name,
            value_from=m.ValueFrom(path=f"{OUTPUTS_DIR}/{name}", default=default),
        )
        for name, default in (
            ("restore-service", "false"),
            ("previous-version", ""),
            ("previous-serving-image", ""),  # the image that serves it (rollback-apply's)
        )
    ]
    return container_step(
        cfg,
        name="restore-champion",
        image="serve",
        module="steps.serve_check.restore",
        args=[
            *("--mlflow-run-id", run_id, "--failures", "{{workflow.failures}}"),
            *("--reason", REASON, "--outputs-dir", OUTPUTS_DIR),
        ],
        settings=settings,
        outputs=outputs,
        tracking=True,  # a small registry call
    )
