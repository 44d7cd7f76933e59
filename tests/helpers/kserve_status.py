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

When a reconcile happens (``Rollout``), from kserve v0.19.0 controller.go
SetupWithManager: on a change of the InferenceService itself (``For``), of its Deployment
or Service (``Owns``), and of one of its pods only where the pod's init containers'
statuses changed (``Watches(&corev1.Pod{})`` with ``podInitContainersPredicate``). The
predictor here is one custom container with no ``storageUri``, so its pods have no init
container (no storage initializer): a kserve-container that crashes or waits in
CrashLoopBackOff changes neither an init container status nor the Deployment's status (its
ReplicaSet's counts stay as they were once the pod was created), and nothing is written.
The next reconcile comes with the Deployment's own next change: its Progressing condition
turning False at ``progressDeadlineSeconds`` (600 s: reconcilers/deployment/
deployment_reconciler.go setDefaultDeploymentSpec), or the rollout completing.
PropagateModelStatus reads ``podList.Items[0]``, in the cache's order: with an old and a
new pod during an update either may be read.
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
    one is read): pending, running, ready, error (terminated), crash-loop."""
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


class Rollout:
    """One InferenceService over time, its status written only by the reconciles the
    controller's watches start (see above): ``apply`` (a spec change), ``deployment`` (the
    Deployment controller wrote a new status), ``pods`` (a kserve-container's state
    changed: no reconcile). ``status`` is what a GET reads at any moment."""

    def __init__(self, name: str = "cifar10-classifier", namespace: str = "argo") -> None:
        self.name, self.namespace = name, namespace
        self.status: dict[str, Any] = {}
        self.conditions: dict[str, tuple[str, str]] = {}  # the Deployment's, type -> ...
        self.pod_states: list[str] = []
        self.reconciles = 0

    def _reconcile(self) -> None:
        self.reconciles += 1
        reconcile(self.status, self.name, self.namespace, self.conditions, self.pod_states)

    def apply(self) -> Rollout:
        """``kubectl apply`` of a new spec: the For() watch reconciles at once (the
        Deployment, if new, has no status yet)."""
        self._reconcile()
        return self

    def deployment(self, conditions: dict[str, tuple[str, str]], pods: list[str]) -> Rollout:
        """The Deployment controller writes ``conditions`` (its ReplicaSets' pods being
        ``pods``): the Owns() watch reconciles when the Deployment's status changed."""
        changed = conditions != self.conditions or len(pods) != len(self.pod_states)
        self.conditions, self.pod_states = dict(conditions), list(pods)
        if changed:
            self._reconcile()
        return self

    def pods(self, states: list[str]) -> Rollout:
        """A kserve-container crashes, restarts or waits in CrashLoopBackOff (a readiness
        change would change the Deployment's counts: ``deployment``): no init container
        status changed, podInitContainersPredicate passes no event, nothing is reconciled
        and the status stays as it was."""
        self.pod_states = list(states)
        return self


# Deployment conditions (type -> (status, reason)) at each point of a rollout
AVAILABLE = ("True", "MinimumReplicasAvailable")
UNAVAILABLE = ("False", "MinimumReplicasUnavailable")
NEW = {"Available": UNAVAILABLE, "Progressing": ("True", "ReplicaSetUpdated")}
UPDATING = {"Available": AVAILABLE, "Progressing": ("True", "ReplicaSetUpdated")}
COMPLETE = {"Available": AVAILABLE, "Progressing": ("True", "NewReplicaSetAvailable")}
NEW_TIMED_OUT = {**NEW, "Progressing": ("False", "ProgressDeadlineExceeded")}
UPDATE_TIMED_OUT = {**UPDATING, "Progressing": ("False", "ProgressDeadlineExceeded")}
REFUSED = {**NEW, "ReplicaFailure": ("True", "FailedCreate")}
