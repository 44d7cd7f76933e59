"""The pods a rendered workflow starts, as the controllers make them, for the checks that
read pods rather than templates (NetworkPolicies select pods by label; Pod Security judges
pod specs):

- a step's pod (Argo v4.0.5 workflow/controller/workflowpod.go createWorkflowPod): labels
  workflows.argoproj.io/workflow and workflows.argoproj.io/completed, the workflow's
  podMetadata then the template's metadata (addMetadata); the pod securityContext of the
  template or else the workflow; the executor's init and wait containers (newExecContainer,
  the controller ConfigMap's ``executor.securityContext``) beside ``main``; volumes
  var-run-argo and tmp-dir (emptyDir), the executor's token Secret (setupServiceAccount);
- the artifact GC pod (artifact_gc.go: workflows.argoproj.io/workflow and /component);
- a PyTorchJob's pods (kubeflow/trainer v1.9.4): the replica's template, the operator's
  labels training.kubeflow.org/{job-name,replica-type,...}, and on Workers the
  init-pytorch container from the operator's template (configs/cluster/training-operator);
- a TrainJob's pods: the ClusterTrainingRuntime's pod template with the TrainJob's runtime
  patch (labels, the containers' securityContext) merged, and JobSet's labels;
- the predictor's pods (KServe v0.19.0 predictor.go buildObjectMeta): the
  InferenceService's labels with serving.kserve.io/inferenceservice and component.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from flows import cifar
from flows.manifests import inferenceservice as isvc
from flows.manifests import trainjob
from flows.manifests.shared_pod import config_args
from steps.common.config import PipelineConfig
from tests.helpers.cluster_build import CLUSTER
from tests.helpers.flow_helpers import job_of, run_of, templates

WORKFLOW = "cifar-pipeline-x1"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
TOKEN_VOLUME = "exec-sa-token"  # Argo v4.0.5 workflow/common/common.go


def executor_security() -> dict[str, Any] | None:
    """The executor's securityContext as configs/cluster/argo's controller ConfigMap sets it."""
    doc = yaml.safe_load((CLUSTER / "argo" / "workflow-controller-configmap.yaml").read_text())
    executor = yaml.safe_load(doc["data"].get("executor", "{}")) or {}
    return executor.get("securityContext")


def minimal_ctr_sc() -> dict[str, Any]:
    """Argo v4.0.5 workflow/common/security_context.go MinimalCtrSC (a resource template's
    executor containers when the ConfigMap sets none)."""
    return {
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "runAsNonRoot": True,
        "runAsUser": 8737,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _exec(name: str, template: dict[str, Any]) -> dict[str, Any]:
    context = executor_security()
    if context is None and "resource" in template:
        context = minimal_ctr_sc()
    return {"name": name, "image": "quay.io/argoproj/argoexec:v4.0.5", "securityContext": context}


def step_pod(wf: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    spec = wf["spec"]
    labels = {WORKFLOW_LABEL: WORKFLOW, "workflows.argoproj.io/completed": "false"}
    labels |= (spec.get("podMetadata") or {}).get("labels") or {}
    labels |= (template.get("metadata") or {}).get("labels") or {}
    main = template.get("container") or {"name": "main"}
    containers = [_exec("wait", template), {**main, "name": "main"}]
    if "resource" in template:
        containers = [_exec("main", template)]
    volumes = [{"name": "var-run-argo", "emptyDir": {}}, {"name": "tmp-dir", "emptyDir": {}}]
    executor = (template.get("executor") or {}).get("serviceAccountName")
    if executor:
        secret = {"secretName": f"{executor}.service-account-token"}
        volumes.append({"name": TOKEN_VOLUME, "secret": secret})
    pod_spec: dict[str, Any] = {
        "serviceAccountName": spec.get("serviceAccountName"),
        "securityContext": template.get("securityContext") or spec.get("securityContext"),
        "initContainers": [_exec("init", template)],
        "containers": containers,
        "volumes": volumes + (spec.get("volumes") or []),
    }
    if template.get("automountServiceAccountToken") is False:
        pod_spec["automountServiceAccountToken"] = False
    return {"name": template["name"], "labels": labels, "spec": pod_spec}


def gc_pod(wf: dict[str, Any]) -> dict[str, Any]:
    labels = {WORKFLOW_LABEL: WORKFLOW, "workflows.argoproj.io/component": "artifact-gc"}
    return {"name": "artifact-gc", "labels": labels, "spec": {}}


def _init_pytorch() -> dict[str, Any]:
    doc = yaml.safe_load((CLUSTER / "training-operator" / "init-container.yaml").read_text())
    (container,) = yaml.safe_load(doc["data"]["initContainer.yaml"].replace("{{", "x{{"))
    return container


def pytorchjob_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    pods = []
    replicas = job["spec"]["pytorchReplicaSpecs"]
    for kind, replica in replicas.items():
        template = copy.deepcopy(replica["template"])
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels |= {
            "training.kubeflow.org/job-name": "cifar-train-x1",
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": kind.lower(),
            "training.kubeflow.org/replica-index": "0",
        }
        if kind == "Master":
            labels["training.kubeflow.org/job-role"] = "master"
        spec = template["spec"]
        if kind == "Worker" and "Master" in replicas:  # pytorch/initcontainer.go
            spec["initContainers"] = [*spec.get("initContainers", []), _init_pytorch()]
        pods.append({"name": f"train/{kind}", "labels": labels, "spec": spec})
    return pods


def trainjob_pods(cfg: PipelineConfig, job: dict[str, Any]) -> list[dict[str, Any]]:
    template = copy.deepcopy(trainjob.runtime_pod(cfg))  # the ClusterTrainingRuntime's
    labels = dict(template["metadata"].get("labels") or {})
    spec = template["spec"]
    for patch in job["spec"].get("runtimePatches", []):
        for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            pod_patch = rj["template"]["spec"]["template"]
            labels |= (pod_patch.get("metadata") or {}).get("labels") or {}
            for container in (pod_patch.get("spec") or {}).get("containers", []):
                for own in spec["containers"]:
                    if own["name"] == container["name"] and "securityContext" in container:
                        own["securityContext"] = container["securityContext"]
    labels |= {"jobset.sigs.k8s.io/jobset-name": "cifar-train-x1"}
    return [{"name": "train/node", "labels": labels, "spec": spec}]


def predictor_pod(cfg: PipelineConfig) -> dict[str, Any]:
    service = isvc.build_inferenceservice(
        cfg, model_uri="models:/m/1", labels={}, settings=config_args(cfg)
    )
    predictor = service["spec"]["predictor"]
    labels = {
        **service["metadata"]["labels"],
        "serving.kserve.io/inferenceservice": service["metadata"]["name"],
        "component": "predictor",
    }
    spec = {k: v for k, v in predictor.items() if k not in ("minReplicas", "maxReplicas")}
    return {"name": "predictor", "labels": labels, "spec": spec}


def workflow_pods(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """Every pod a run of ``cfg`` starts (the training job's for nodes=2 when multi-node)."""
    template = cifar.build_template(cfg).to_dict()
    wf = run_of(cfg)
    pods = [step_pod(wf, t) for t in templates(wf).values() if "container" in t or "resource" in t]
    pods.append(gc_pod(wf))
    job = job_of(template, nodes="2") if cfg.train.launcher == "pytorchjob" else job_of(template)
    if job["kind"] == "PyTorchJob":
        pods += pytorchjob_pods(job)
    else:
        pods += trainjob_pods(cfg, job)
    if cfg.serving.enabled:
        pods.append(predictor_pod(cfg))
    return pods
