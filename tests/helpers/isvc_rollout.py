"""The champion's InferenceService as the deploy and rollback templates apply it, and the
statuses KServe v0.19.0's reconciler writes at each point of its rollout
(tests/helpers/kserve_status.py, which cites the files), with what Argo decides for
``deploy`` at each (``DEPLOY``): read by tests/test_inferenceservice.py and
tests/test_conformance_jobs.py."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.helpers import kserve_status as ks

VALUES = {"model-uri": "models:/cifar10-classifier/7", "run-id": "0123456789abcdef" * 2}
VALUES |= {"model-version": "7", "previous-version": "6"}
# the benchmark's choice: v7 runs a torch variant, v6 portable ones (registered_model.SERVED_BY)
VALUES |= {"serving-image": "ghcr.io/cifar-pipeline/cifar-optimize:0.1.0"}
VALUES |= {"previous-serving-image": "ghcr.io/cifar-pipeline/cifar-serve:0.1.0"}


def applied(template: dict[str, Any]) -> dict[str, Any]:
    """The manifest ``kubectl apply`` gets: the raw artifact ``manifestFrom`` names, the
    inputs substituted as Argo does."""
    assert template["resource"]["manifestFrom"] == {"artifact": {"name": "manifest"}}
    (artifact,) = template["inputs"]["artifacts"]
    text = artifact["raw"]["data"]
    pattern = r"\{\{inputs\.parameters\.([a-z-]+)\}\}"
    return yaml.safe_load(re.sub(pattern, lambda match: VALUES[match.group(1)], text))


def ready_rollout(name: str, ns: str) -> ks.Rollout:
    """A first rollout that completed: the previous version Ready."""
    return (
        ks.Rollout(name, ns)
        .apply()
        .deployment(ks.NEW, ["running"])
        .deployment(ks.COMPLETE, ["ready"])
    )


def rollout(case: str, name: str, ns: str) -> ks.Rollout:
    """The service at each point, reconciled only when KServe's watches fire
    (tests/helpers/kserve_status.py Rollout): a container crashing writes nothing."""
    first = ks.Rollout(name, ns).apply()
    if case == "pods-refused":
        return first.deployment(ks.REFUSED, [])
    if case == "unschedulable-past-deadline":  # no node fits: the pod stays Pending
        return first.deployment(ks.NEW, ["pending"]).deployment(ks.NEW_TIMED_OUT, ["pending"])
    if case == "rolling-out":
        return first.deployment(ks.NEW, ["running"])
    if case in ("crashed", "crash-looping", "crash-looping-past-deadline"):
        crashing = first.deployment(ks.NEW, ["running"])
        crashing.pods(["error" if case == "crashed" else "crash-loop"])
        if case == "crash-looping-past-deadline":  # the Deployment gives up: a reconcile
            crashing.deployment(ks.NEW_TIMED_OUT, ["crash-loop"])
        return crashing
    service = ready_rollout(name, ns)
    if case == "ready":
        return service
    if case == "re-applied":  # Argo's first GET, before KServe reconciled the new spec
        return service
    # KServe has reconciled the new spec: a second ReplicaSet rolls, the old pod serving
    service.apply().deployment(ks.UPDATING, ["ready", "running"])
    if case in ("update-crash-looping", "update-crash-looping-past-deadline"):
        service.pods(["ready", "crash-loop"])
    if case.endswith("past-deadline"):
        service.deployment(ks.UPDATE_TIMED_OUT, service.pod_states)
    return service


def status_of(case: str, name: str = "cifar10-classifier", ns: str = "argo") -> dict[str, Any]:
    """The service's status as a GET reads it at each point of its rollout."""
    if case == "created":
        return {}
    if case == "reconcile-failed":  # a component's error: status written, no Stopped yet
        status: dict[str, Any] = {}
        ks.reconcile(status, name, ns, ks.NEW, ["running"])
        ks.mark(status, "PredictorReady", "False", "ReconcileFailed")
        return status
    return rollout(case, name, ns).status


DEPLOY = {  # case -> what Argo decides for `deploy`
    "created": "waiting",
    "rolling-out": "waiting",
    "reconcile-failed": "waiting",  # KServe retries; a lasting one meets the deadline
    "unschedulable-past-deadline": "waiting",  # nothing reports it: the deadline ends it
    # A first rollout whose container crashes: no reconcile until the Deployment's progress
    # deadline, and then PredictorReady says MinimumReplicasUnavailable, as during every
    # first rollout. FailedToLoad is written at that reconcile, but it also stays in the
    # status a later deploy reads first (Argo's GET right after its apply), so it is no
    # failure condition: the step's deadline, serving.ready_timeout_s, ends these.
    "crashed": "waiting",
    "crash-looping": "waiting",
    "crash-looping-past-deadline": "waiting",
    "ready": "succeeded",
    # the known limit (flows/pipeline/serving_templates.py): serve-check waits for the
    # version instead
    "re-applied": "succeeded",
    "updating": "waiting",
    "update-crash-looping": "waiting",  # serve-check, waiting for the version, ends it
    "update-crash-looping-past-deadline": "failed",  # ProgressDeadlineExceeded
    "update-past-deadline": "failed",
    "pods-refused": "failed",
}
