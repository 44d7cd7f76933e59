"""The champion's InferenceService and the deploy / rollback templates, checked as KServe
v0.19.0 and Argo v4.0.5 would take them, without a cluster: the manifest against the CRD
(../shared/tools/validate_manifests.py, after Argo's parameter substitution), and the
resource conditions evaluated as Argo evaluates them (tests/helpers/argo_conditions.py) against
the statuses KServe's reconciler writes (tests/helpers/kserve_status.py, which cites the files)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hera.workflows import WorkflowTemplate
from kubernetes.utils.quantity import parse_quantity

from flows.manifests import inferenceservice as isvc
from flows.manifests.names import dns1035
from flows.manifests.shared_pod import config_args
from flows.pipeline import serving_templates as serving
from flows.pipeline.serving_templates import FAILURE, SUCCESS, serving_templates
from steps.common.config import PipelineConfig, load_config
from tests.helpers import cluster_build
from tests.helpers import kserve_status as ks
from tests.helpers.argo_conditions import LABEL_VALUE, outcome, parse
from tests.helpers.cluster_build import POPULATE
from tests.helpers.flow_helpers import CONFIGS, VALIDATOR
from tests.helpers.isvc_rollout import DEPLOY, VALUES, applied, status_of


def rendered(cfg: PipelineConfig) -> dict[str, Any]:
    """The serving templates (deploy, serve-check, the rollbacks), as a WorkflowTemplate of
    their own."""
    with WorkflowTemplate(name="serving", entrypoint="deploy") as wt:
        serving_templates(cfg, config_args(cfg))
    return wt.to_dict()


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in doc["spec"]["templates"]}


def container(service: dict[str, Any]) -> dict[str, Any]:
    (found,) = service["spec"]["predictor"]["containers"]
    return found


CASES = {  # name -> (overrides, what the predictor must hold)
    "defaults": ([], {"minReplicas": 1, "maxReplicas": 1}),
    "autoscaled": (["serving.min_replicas=2", "serving.max_replicas=4"], {"maxReplicas": 4}),
    "gpu-node": (
        [
            "serving.gpus=1",
            'serving.node_selector={"pool":"gpu"}',
            'serving.tolerations=[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]',
        ],
        {
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_the_service_runs_the_serving_image_as_every_pod_runs(case: str) -> None:
    overrides, wanted = CASES[case]
    cfg = load_config(None, overrides)
    service = isvc.build_inferenceservice(cfg, model_uri="models:/m/3", labels={"a": "b"})
    meta, predictor = service["metadata"], service["spec"]["predictor"]
    assert meta["annotations"] == {"serving.kserve.io/deploymentMode": "Standard"}
    assert (meta["name"], meta["namespace"]) == (cfg.serving.name, cfg.cluster.namespace)
    assert "ownerReferences" not in meta and meta["labels"]["a"] == "b"
    assert wanted.items() <= predictor.items()
    assert predictor["automountServiceAccountToken"] is False
    assert predictor["securityContext"]["runAsNonRoot"] is True
    c = container(service)
    assert (c["name"], c["image"]) == (
        "kserve-container",
        "ghcr.io/cifar-pipeline/cifar-serve:0.1.0",
    )
    assert c["command"] == ["python", "-m", "steps.serve"]
    assert c["args"][:6] == ["--model-uri", "models:/m/3", "--host", "0.0.0.0", "--port", "8080"]
    assert c["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": 8080}
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    gpus = c["resources"]["limits"].get("nvidia.com/gpu")
    assert gpus == (str(cfg.serving.gpus) if cfg.serving.gpus else None)
    load_config(None, [a for a in c["args"][7::2]])  # the --set arguments load


def test_the_server_gets_its_own_sections_of_the_config_only() -> None:
    cfg = load_config(None, ["serving.max_batch=8", "train.epochs=3", "tracking.experiment=e"])
    c = container(isvc.build_inferenceservice(cfg, model_uri="m", labels={}))
    settings = c["args"][6:]
    assert settings == ["--set", "tracking.experiment=e", "--set", "serving.max_batch=8"]


def test_secrets_reach_the_server_by_reference_only() -> None:
    """The predictor's own credentials (read-only in S3 and MLflow), never the steps'."""
    cfg = load_config(
        None,
        [
            "storage.root_uri=s3://bucket/x",
            "cluster.mlflow_secret=cifar-mlflow",
            "cluster.predictor_mlflow_secret=cifar-predictor-mlflow",
        ],
    )
    env = {
        e["name"]: e
        for e in container(isvc.build_inferenceservice(cfg, model_uri="m", labels={}))["env"]
    }
    for name, secret in (
        ("AWS_ACCESS_KEY_ID", "cifar-predictor-s3"),
        ("AWS_SECRET_ACCESS_KEY", "cifar-predictor-s3"),
        ("MLFLOW_TRACKING_USERNAME", "cifar-predictor-mlflow"),
        ("MLFLOW_TRACKING_PASSWORD", "cifar-predictor-mlflow"),
    ):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": secret, "key": name}


def test_the_applied_services_name_the_run_and_version_in_valid_labels() -> None:
    cfg = PipelineConfig()
    found = by_name(rendered(cfg))
    for name, version, uri, image in (
        ("deploy", "7", "models:/cifar10-classifier/7", VALUES["serving-image"]),
        ("rollback-apply", "6", "models:/cifar10-classifier/6", VALUES["previous-serving-image"]),
    ):
        service = applied(found[name])
        assert container(service)["image"] == image  # each version in the image that serves it
        labels = service["metadata"]["labels"]
        assert labels[isvc.VERSION_LABEL] == version and labels[isvc.RUN_LABEL] == VALUES["run-id"]
        assert all(LABEL_VALUE.fullmatch(v) and len(v) <= 63 for v in labels.values()), labels
        assert dns1035(service["metadata"]["name"]) == service["metadata"]["name"]
        assert container(service)["args"][1] == uri
        resource = found[name]["resource"]
        assert resource["action"] == "apply" and not resource.get("setOwnerReference")
    outputs = {
        p["name"]: p["valueFrom"]["jsonPath"] for p in found["deploy"]["outputs"]["parameters"]
    }
    assert outputs == {"url": "{.status.address.url}", "external-url": "{.status.url}"}


def test_the_rollback_delete_names_the_service_and_waits_for_nothing_else() -> None:
    """Argo runs ``kubectl delete --ignore-not-found <flags> -o name`` and refuses
    conditions or outputs on a delete (v4.0.5 cmd/argoexec/commands/resource.go)."""
    cfg = load_config(None, ["serving.name=champion"])
    delete = by_name(rendered(cfg))["rollback-delete"]
    assert delete["resource"] == {
        "action": "delete",
        "flags": ["inferenceservices.serving.kserve.io", "champion"],
    }
    assert "outputs" not in delete and "inputs" not in delete


# --- the conditions, as Argo decides them over KServe's statuses ---------------------------


def test_a_crashing_container_writes_nothing_until_the_deployment_changes() -> None:
    """KServe v0.19.0 reconciles a pod's change only when its init containers' statuses
    change (controller.go podInitContainersPredicate); a crash-looping kserve-container
    (no init container: no storage initializer) is read only at the next reconcile the
    Deployment starts, its progress deadline."""
    service = ks.Rollout().apply().deployment(ks.NEW, ["running"])
    before, count = json.loads(json.dumps(service.status)), service.reconciles
    service.pods(["crash-loop"])
    assert (service.status, service.reconciles) == (before, count)
    assert service.status["modelStatus"]["states"]["targetModelState"] == "Pending"
    service.deployment(ks.NEW_TIMED_OUT, ["crash-loop"])
    assert service.reconciles == count + 1
    assert service.status["modelStatus"]["states"]["targetModelState"] == "FailedToLoad"
    predictor = next(c for c in service.status["conditions"] if c["type"] == "PredictorReady")
    assert predictor["reason"] == "MinimumReplicasUnavailable"  # as in every first rollout


def test_the_failure_condition_reads_what_the_deployment_reports() -> None:
    """The deploy step fails on what PropagateRawStatus copies from the predictor's
    Deployment into PredictorReady, never on modelStatus (PropagateModelStatus): its
    FailedToLoad is written only at a reconcile something else starts, and stays in the
    status a later apply reads before KServe reconciles it."""
    assert "modelStatus" not in FAILURE and "FailedToLoad" not in FAILURE
    # a new version applied over a service an earlier run left crash-looping: Argo's first
    # GET reads the old status, which must not fail the new deploy
    left = status_of("crash-looping-past-deadline")
    assert left["modelStatus"]["states"]["targetModelState"] == "FailedToLoad"
    service = applied(by_name(rendered(load_config(None, [])))["deploy"])
    assert outcome({**service, "status": left}, SUCCESS, FAILURE) == "waiting"


def test_kserve_keeps_ready_where_the_conditions_look() -> None:
    for case in DEPLOY:
        conditions = [c["type"] for c in status_of(case).get("conditions", [])]
        if conditions:
            assert conditions[serving.PREDICTOR_AT : serving.READY_AT + 1] == [
                "PredictorReady",
                "Ready",
            ], case


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_steps_end_as_the_rollout_ends(path: Path) -> None:
    cfg = load_config(path, [])
    found = by_name(rendered(cfg))
    for name, failure_too in (("deploy", True), ("rollback-apply", False)):
        resource = found[name]["resource"]
        assert resource["successCondition"] == SUCCESS
        assert resource.get("failureCondition") == (FAILURE if failure_too else None)
        parse(SUCCESS), parse(FAILURE)  # labels.Parse takes them
        service = applied(found[name])
        decided = {
            case: outcome(
                {**service, "status": status_of(case)},
                SUCCESS,
                resource.get("failureCondition", ""),
            )
            for case in DEPLOY
        }
        wanted = {c: (o if failure_too or o != "failed" else "waiting") for c, o in DEPLOY.items()}
        assert decided == wanted, (path.stem, name)
        assert int(found[name]["activeDeadlineSeconds"]) >= cfg.serving.ready_timeout_s


def test_a_ready_service_has_both_urls_the_outputs_read() -> None:
    status = status_of("ready")
    assert status["address"]["url"] == "http://cifar10-classifier-predictor.argo.svc.cluster.local"
    assert status["url"].startswith("http://cifar10-classifier-argo.")


@pytest.mark.skipif(not VALIDATOR.is_file(), reason="../shared (the schema validator) is absent")
def test_every_service_passes_the_crd(tmp_path: Path) -> None:
    """For every config, the templates through the strict validator (which fills the
    parameters of each manifestFrom artifact and checks the InferenceService against
    KServe v0.19.0's CRD), and the applied services with realistic inputs."""
    files = []
    for path in CONFIGS:
        doc = rendered(load_config(path, []))
        applies = [
            t for t in by_name(doc).values() if t.get("resource", {}).get("action") == "apply"
        ]
        services = [applied(t) for t in applies]
        files.append(tmp_path / f"{path.stem}.yaml")
        files[-1].write_text(yaml.safe_dump_all([doc, *services], sort_keys=False))
    done = subprocess.run(
        [sys.executable, str(VALIDATOR), *map(str, files)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(f"{3 * len(CONFIGS)} documents checked, 0 problems")
    # deploy's and rollback-apply's manifests inside each template, checked too
    assert f"({2 * len(CONFIGS)} job manifests from manifestFrom raw" in done.stdout


# --- the resources, as KServe defaults them -------------------------------------------------


def kserve_defaulted(resources: dict[str, Any], config_map: dict[str, Any]) -> dict[str, Any]:
    """The predictor container's resources after KServe v0.19.0's mutating webhook
    (InferenceServiceDefaulter): pkg/apis/serving/v1beta1/predictor_custom.go
    CustomPredictor.Default calls inference_service_defaults.go
    setResourceRequirementDefaults, which takes ``resource`` of the ConfigMap's
    ``inferenceService`` key (configmap.go NewInferenceServicesConfig) and sets each of
    cpuRequest / memoryRequest / cpuLimit / memoryLimit that is not empty where the
    container has no value of its own for that resource."""
    config = json.loads(config_map["data"]["inferenceService"]).get("resource", {})
    requests = dict(resources.get("requests") or {})
    limits = dict(resources.get("limits") or {})
    for key, target, name in (
        ("cpuRequest", requests, "cpu"),
        ("memoryRequest", requests, "memory"),
        ("cpuLimit", limits, "cpu"),
        ("memoryLimit", limits, "memory"),
    ):
        if config.get(key):
            target.setdefault(name, config[key])
    return {"requests": requests, "limits": limits}


def over_limit(resources: dict[str, Any]) -> list[str]:
    """What the API server refuses in a container (kubernetes pkg/apis/core/validation
    validation.go ValidateResourceRequirements: a request above its limit, "must be less
    than or equal to <resource> limit"; an extended resource's request unequal to it)."""
    requests, limits = resources["requests"], resources["limits"]
    problems = []
    for name, limit in limits.items():
        if name not in requests:
            continue
        request, cap = parse_quantity(requests[name]), parse_quantity(limit)
        if request > cap or ("/" in name and request != cap):
            problems.append(f"{name}: request {requests[name]} > limit {limit}")
    return problems


RESOURCE_CASES = {  # name -> overrides; the config's CPU must be the pod's, request and limit
    "cpu-1": ["serving.cpu=1"],
    "cpu-2": ["serving.cpu=2", "serving.memory=4Gi"],
    "cpu-500m": ["serving.cpu=500m"],
    "gpu": ["serving.gpus=1", "serving.cpu=4", "serving.memory=16Gi"],
}


@pytest.mark.parametrize("case", RESOURCE_CASES)
def test_kserves_defaults_leave_every_request_within_its_limit(case: str) -> None:
    """Issue 30, defect 4: with no CPU limit of its own, the webhook gave the server the
    ConfigMap's ``cpuLimit`` "1": at serving.cpu 2 a request over its limit, which the
    API server refuses in the predictor's Deployment (KServe reports ReconcileFailed), and
    at 1 or below a cap the config never asked for."""
    builds = cluster_build.vendored_builds()
    if builds is None:
        pytest.skip(f"KServe's inferenceservice-config comes with the vendored install: {POPULATE}")
    (config_map,) = [
        d
        for d in builds["kserve"]
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "inferenceservice-config"
    ]
    assert json.loads(config_map["data"]["inferenceService"])["resource"]["cpuLimit"] == "1"
    cfg = load_config(None, RESOURCE_CASES[case])
    service = isvc.build_inferenceservice(cfg, model_uri="models:/m/3", labels={})
    resources = kserve_defaulted(container(service)["resources"], config_map)
    assert over_limit(resources) == []
    s = cfg.serving
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == s.cpu
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == s.memory
    if s.gpus:
        assert resources["requests"][isvc.GPU] == resources["limits"][isvc.GPU] == str(s.gpus)


def test_the_limit_check_refuses_what_the_api_server_refuses() -> None:
    assert over_limit({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}) == [
        "cpu: request 2 > limit 1"
    ]
    assert over_limit({"requests": {"cpu": "1500m"}, "limits": {"cpu": "2"}}) == []
    assert over_limit({"requests": {"memory": "3Gi"}, "limits": {"memory": "2Gi"}})
    assert over_limit({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}})


def test_scale_to_zero_is_refused_with_the_reason(tmp_path: Path) -> None:
    """serving.min_replicas 0 was documented as scale to zero, but KServe v0.19.0's
    Standard mode raises an HPA's minReplicas below 1 to 1 (reconcilers/hpa/
    hpa_reconciler.go createHPA, constants.DefaultMinReplicas): refused in one line, exit 2,
    before anything renders."""
    from steps.common.config import ConfigError

    with pytest.raises(ConfigError, match=r"serving\.min_replicas: .*never scales to zero"):
        load_config(None, ["serving.min_replicas=0"])
    cifar = Path(__file__).resolve().parents[1] / "flows" / "cifar.py"
    done = subprocess.run(
        [sys.executable, str(cifar), "--render", "--set", "serving.min_replicas=0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "serving.min_replicas" in line and "use 1 or more" in line, line
    assert load_config(None, ["serving.min_replicas=1"]).serving.min_replicas == 1
