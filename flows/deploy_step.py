"""The deploy step and its rollback: Argo resource templates on the champion's
InferenceService (flows/manifests/inferenceservice.py).

- ``deploy``: ``kubectl apply`` of the service for the ``model-uri`` input (labelled with
  the MLflow ``run-id`` and the ``model-version``); it succeeds when the service is Ready
  and fails on a failed rollout or at its deadline, ``serving.ready_timeout_s``; its
  outputs are the in-cluster ``url`` (``status.address.url``) and the ``external-url``
  (``status.url``). No ownerReference: the service outlives the workflow.
- ``rollback-apply``: the same service for the registry version ``previous-version``.
- ``rollback-delete``: deletes the service (a first deployment that failed).

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
endpoint to serve the version deployed, and a failure of either step rolls back
(flows/serve_tasks.py).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import yaml
from hera.workflows import Artifact, Parameter, RawArtifact, Resource
from hera.workflows import models as m

from flows.manifests import inferenceservice as isvc
from flows.manifests.names import APP
from flows.parameters import input_ref
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
# the new version (flows/serve_tasks.py), or by ProgressDeadlineExceeded.
FAILURE = f"status.conditions.{PREDICTOR_AT}.reason in (FailedCreate, ProgressDeadlineExceeded)"


class ServingTemplates(NamedTuple):
    deploy: Resource
    rollback_apply: Resource
    rollback_delete: Resource


def deadline_s(cfg: PipelineConfig) -> int:
    return math.ceil(cfg.serving.ready_timeout_s)


def manifest(cfg: PipelineConfig, settings: list[str], *, model_uri: str, version: str) -> str:
    service_labels = {isvc.RUN_LABEL: input_ref("run-id"), isvc.VERSION_LABEL: version}
    data = isvc.build_inferenceservice(
        cfg, model_uri=model_uri, labels=service_labels, settings=settings
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
    """The manifest as a raw input artifact, as train carries its job (flows/train_step.py)."""
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


def deploy_templates(cfg: PipelineConfig, settings: list[str]) -> ServingTemplates:
    """``settings``: every step's ``--set`` arguments (the server keeps its sections); the
    manifests are ``manifestFrom`` raw artifacts."""
    urls = [
        Parameter(name="url", value_from=m.ValueFrom(json_path="{.status.address.url}")),
        Parameter(name="external-url", value_from=m.ValueFrom(json_path="{.status.url}")),
    ]
    deploy = _apply(
        cfg,
        name="deploy",
        text=manifest(
            cfg, settings, model_uri=input_ref("model-uri"), version=input_ref("model-version")
        ),
        inputs=["model-uri", "run-id", "model-version"],
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
            settings,
            model_uri=f"models:/{cfg.benchmark.registered_model}/{previous}",
            version=previous,
        ),
        inputs=["previous-version", "run-id"],
        failure=None,
        outputs=None,
    )
    return ServingTemplates(deploy, rollback_apply, delete_template(cfg))


def delete_template(cfg: PipelineConfig) -> Resource:
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
