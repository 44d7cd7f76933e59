"""The status KServe v0.19.0 gives a Standard-mode InferenceService (a test helper).

What is kept, from kserve v0.19.0:
- pkg/controller/v1beta1/inferenceservice/controller.go Reconcile: InitializeConditions
  when there is no Ready condition, the components (the predictor), then Stopped False,
  then the ingress, then one status write (updateStatus);
- pkg/apis/serving/v1beta1/inference_service_status.go: the living condition set
  (Ready over PredictorReady and IngressReady), SetCondition (Unknown / True / False to
  MarkUnknown / MarkTrueWithReason / MarkFalse), PropagateRawStatus (the predictor
  Deployment's Available, Progressing and ReplicaFailure conditions into PredictorReady,
  ReplicaFailure winning, then Available False, then Progressing), PropagateModelStatus
  (Pending without pods; Loaded once Ready; FailedToLoad when kserve-container terminated
  with Error or waits in CrashLoopBackOff; else Pending) and UpdateModelRevisionStates;
- reconcilers/ingress/kube_ingress_reconciler.go Reconcile with Ingress creation disabled
  (configs/cluster/kserve): status.url, status.address and IngressReady True.
And from knative.dev/pkg apis/condition_set.go: SetCondition keeps the conditions sorted by
type; MarkFalse of a dependent makes Ready False with its reason; MarkUnknown makes Ready
Unknown unless a dependent is False; MarkTrue makes Ready True when every dependent is.

The Deployment's conditions are Kubernetes' (pkg/controller/deployment sync.go
calculateStatus, progress.go syncRolloutStatus; util/deployment_util.go reasons).
"""

from __future__ import annotations

from typing import Any

HAPPY, DEPENDENTS = "Ready", ("PredictorReady", "IngressReady")


def _set(status: dict[str, Any], kind: str, value: str, reason: str = "") -> None:
    kept = [c for c in status.get("conditions", []) if c["type"] != kind]
    new = {"type": kind, "status": value, **({"reason": reason} if reason else {})}
    status["conditions"] = sorted([*kept, new], key=lambda c: c["type"])


def _get(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def mark(status: dict[str, Any], kind: str, value: str, reason: str = "") -> None:
    """InferenceServiceStatus.SetCondition through the living condition set."""
    _set(status, kind, value, reason)
    if kind not in DEPENDENTS:
        return
    deps = [_get(status, d) for d in DEPENDENTS]
    false = [d for d in deps if d and d["status"] == "False"]
    if value == "False" or false:
        _set(status, HAPPY, "False", (false[-1] if false else {}).get("reason", reason))
    elif value == "Unknown" or any(d is None or d["status"] != "True" for d in deps):
        _set(status, HAPPY, "Unknown", reason)
    else:
        _set(status, HAPPY, "True")


def propagate_raw(status: dict[str, Any], deployment: dict[str, tuple[str, str]]) -> None:
    """PropagateRawStatus: ``deployment`` maps a condition type to (status, reason)."""
    ready = ("False", "")
    available = deployment.get("Available")
    if available and available[0] == "True":
        ready = available
    progressing = deployment.get("Progressing")
    if progressing and progressing[0] == "False":
        ready = ("False", progressing[1])  # it carries a message when it gave up
    elif progressing and progressing[0] == "True":
        complete = progressing[1] == "NewReplicaSetAvailable"
        ready = progressing if complete else ("Unknown", progressing[1])
    if available and available[0] == "False":
        ready = available
    failure = deployment.get("ReplicaFailure")
    if failure and failure[0] == "True":
        ready = ("False", failure[1])
    mark(status, "PredictorReady", *ready)


def propagate_model(status: dict[str, Any], pods: list[str]) -> None:
    """PropagateModelStatus: ``pods`` is the kserve-container state of each pod (the first
    one is read): running, ready, error (terminated), crash-loop."""
    model = status.setdefault("modelStatus", {"transitionStatus": "UpToDate"})
    model["copies"] = {"failedCopies": 0, "totalCopies": pods.count("ready")}

    def states(state: str, transition: str) -> None:
        model.setdefault("states", {"activeModelState": ""})["targetModelState"] = state
        model["transitionStatus"] = transition
        if state == "Loaded":
            model["states"]["activeModelState"] = "Loaded"

    ready = (_get(status, HAPPY) or {}).get("status") == "True"
    if not pods:
        states("Pending", "InProgress")
    elif ready:
        states("Loaded", "UpToDate")
    elif pods[0] in ("error", "crash-loop"):
        states("FailedToLoad", "BlockedByFailedLoad")
    else:
        states("Pending", "InProgress")


def reconcile(
    status: dict[str, Any],
    name: str,
    namespace: str,
    deployment: dict[str, tuple[str, str]],
    pods: list[str],
) -> dict[str, Any]:
    """One Reconcile of the service over its Deployment and pods; returns the status."""
    if _get(status, HAPPY) is None:  # InitializeConditions
        for kind in (HAPPY, *DEPENDENTS):
            if _get(status, kind) is None:
                _set(status, kind, "Unknown")
    status["deploymentMode"] = "Standard"
    propagate_raw(status, deployment)
    propagate_model(status, pods)
    if _get(status, "Stopped") is None:
        _set(status, "Stopped", "False")
    status["url"] = f"http://{name}-{namespace}.example.com"
    status["address"] = {"url": f"http://{name}-predictor.{namespace}.svc.cluster.local"}
    mark(status, "IngressReady", "True")
    return status


# Deployment conditions (type -> (status, reason)) at each point of a rollout
AVAILABLE = ("True", "MinimumReplicasAvailable")
UNAVAILABLE = ("False", "MinimumReplicasUnavailable")
NEW = {"Available": UNAVAILABLE, "Progressing": ("True", "ReplicaSetUpdated")}
UPDATING = {"Available": AVAILABLE, "Progressing": ("True", "ReplicaSetUpdated")}
COMPLETE = {"Available": AVAILABLE, "Progressing": ("True", "NewReplicaSetAvailable")}
NEW_TIMED_OUT = {**NEW, "Progressing": ("False", "ProgressDeadlineExceeded")}
UPDATE_TIMED_OUT = {**UPDATING, "Progressing": ("False", "ProgressDeadlineExceeded")}
REFUSED = {**NEW, "ReplicaFailure": ("True", "FailedCreate")}
