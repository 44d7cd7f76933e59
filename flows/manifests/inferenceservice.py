"""The champion's KServe InferenceService (``serving.kserve.io/v1beta1``, KServe v0.19.0).

Standard mode (a Deployment, a Service and, when the replicas may vary, an HPA; no Knative,
no Istio), asked for by the annotation KServe reads (kserve v0.19.0 pkg/constants/
constants.go: ``DeploymentMode = "serving.kserve.io/deploymentMode"``; ``Standard``, with
``RawDeployment`` the deprecated spelling that ParseDeploymentMode normalises to it).

The predictor is one custom container named ``kserve-container`` (constants.go
InferenceServiceContainerName: the name KServe reads the model's load state from,
inference_service_status.go PropagateModelStatus) running ``python -m steps.serve`` of the
image that serves the champion: ``cifar-serve`` (no torch) for portable variants,
``cifar-optimize`` (the torch that built them) for torch ones, as the benchmark's
``serving-image`` output says (steps/benchmark/registered_model.py). Its pod parts are
built on the Kubernetes client's typed models and serialised as the API server takes them
(as flows/manifests/pytorchjob.py does); the envelope is plain data. The pod runs as every
pod of the pipeline does (flows/manifests/shared_pod.py): no root, no capabilities, Secrets by
reference only (its own: ``predictor_env``, read-only in S3 and MLflow), and no
service-account token (the server talks to MLflow and S3, never to the API server).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from flows.manifests.names import APP
from flows.manifests.names import labels as app_labels
from flows.manifests.shared_pod import (
    config_args,
    container_security,
    pod_security,
    predictor_env,
    toleration,
)
from steps.common.config import PipelineConfig

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"  # kserve constants.DeploymentMode
STANDARD = "Standard"  # kserve constants.Standard (RawDeployment: deprecated alias)
CONTAINER = "kserve-container"  # kserve constants.InferenceServiceContainerName
GPU = "nvidia.com/gpu"
READY_PATH = "/v2/health/ready"  # the server's readiness (model loaded)
LIVE_PATH = "/v2/health/live"  # the server's liveness (process up)
RUN_LABEL = f"{APP}/mlflow-run-id"  # the MLflow run that deployed it
VERSION_LABEL = f"{APP}/model-version"  # the registry version it serves
# The sections the server reads; others (train, data, ...) would only restart its pods.
SERVER_SECTIONS = ("serving", "tracking", "storage")


def server_settings(settings: list[str]) -> list[str]:
    """The ``--set`` pairs of ``settings`` that the server reads (SERVER_SECTIONS)."""
    pairs = zip(settings[::2], settings[1::2], strict=True)
    wanted = [p for p in pairs if p[1].split(".", 1)[0] in SERVER_SECTIONS]
    return [arg for pair in wanted for arg in pair]


def _resources(cfg: PipelineConfig) -> k8s.V1ResourceRequirements:
    """Requests and limits both set, CPU included: KServe's defaulting webhook fills any
    limit the container leaves out from inferenceservice-config's ``inferenceService.resource``
    (kserve v0.19.0 pkg/apis/serving/v1beta1/predictor_custom.go CustomPredictor.Default ->
    inference_service_defaults.go setResourceRequirementDefaults; ``cpuLimit: "1"`` in the
    installed ConfigMap), which would cap the server at one CPU and make a ``serving.cpu``
    above 1 a request over its limit, a Deployment the API server refuses."""
    s = cfg.serving
    requests: dict[str, str] = {"cpu": s.cpu, "memory": s.memory}
    limits: dict[str, str] = {"cpu": s.cpu, "memory": s.memory}
    if s.gpus:  # extended resources: request and limit must be equal
        requests[GPU] = limits[GPU] = str(s.gpus)
    return k8s.V1ResourceRequirements(requests=requests, limits=limits)


def _probe(path: str, port: int, *, period_s: int, failures: int) -> k8s.V1Probe:
    return k8s.V1Probe(
        http_get=k8s.V1HTTPGetAction(path=path, port=port),
        period_seconds=period_s,
        timeout_seconds=5,
        failure_threshold=failures,
    )


def build_container(
    cfg: PipelineConfig, *, model_uri: str, settings: list[str], image: str | None = None
) -> k8s.V1Container:
    """``python -m steps.serve`` on all interfaces of the pod, at ``serving.port``, in
    ``image`` (default: cifar-serve)."""
    port = cfg.serving.port
    args = ["--model-uri", model_uri, "--host", "0.0.0.0", "--port", str(port)]
    return k8s.V1Container(
        name=CONTAINER,
        image=image or cfg.images.image("serve"),
        image_pull_policy=cfg.images.pull_policy,
        command=["python", "-m", "steps.serve"],
        args=[*args, *server_settings(settings)],
        env=[item.k8s() for item in predictor_env(cfg)],
        ports=[k8s.V1ContainerPort(container_port=port, protocol="TCP")],
        # Ready once the model is loaded; a load may take a while (the registry, S3), so
        # liveness gives the process room and only restarts one that stops answering.
        readiness_probe=_probe(READY_PATH, port, period_s=5, failures=3),
        liveness_probe=_probe(LIVE_PATH, port, period_s=10, failures=6),
        resources=_resources(cfg),
    )


def _serialise(value: Any) -> Any:
    return k8s.ApiClient().sanitize_for_serialization(value)


def build_inferenceservice(
    cfg: PipelineConfig,
    *,
    model_uri: str,
    labels: dict[str, str],
    settings: list[str] | None = None,
    image: str | None = None,
) -> dict[str, Any]:
    """The InferenceService named ``serving.name`` in ``cluster.namespace`` serving
    ``model_uri`` from ``image`` (default: cifar-serve); ``labels`` (e.g. RUN_LABEL,
    VERSION_LABEL) join the app's labels; ``settings``: the config as ``--set`` arguments
    (default: ``config_args(cfg)``), of which the server gets its own sections. No
    ownerReference: it outlives the workflow."""
    s = cfg.serving
    container = _serialise(
        build_container(
            cfg,
            model_uri=model_uri,
            settings=config_args(cfg) if settings is None else settings,
            image=image,
        )
    )
    container["securityContext"] = container_security(cfg)
    predictor: dict[str, Any] = {
        "minReplicas": s.min_replicas,
        "maxReplicas": s.max_replicas,
        "containers": [container],
        "securityContext": pod_security(cfg),
        "automountServiceAccountToken": False,
    }
    if s.node_selector:
        predictor["nodeSelector"] = dict(s.node_selector)
    if s.tolerations:
        predictor["tolerations"] = _serialise([toleration(t) for t in s.tolerations])
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": s.name,
            "namespace": cfg.cluster.namespace,
            "labels": {**app_labels(cfg), f"{APP}/step": "deploy", **labels},
            "annotations": {DEPLOYMENT_MODE: STANDARD},
        },
        "spec": {"predictor": predictor},
    }
