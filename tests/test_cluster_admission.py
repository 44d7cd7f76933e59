"""The install's ValidatingAdmissionPolicy on what the workflow's account creates
(configs/cluster/pipeline/admission-policy.yaml, issue 38 item 5) evaluated with a
maintained CEL implementation, cel-python (``celpy``), as the API server evaluates it
(tests/helpers/admission_policies.py: the matchConditions, then every validation, ``variables`` as
"Variable composition" defines them).

Every rendered job and InferenceService of every config (and its RDMA and host-network
variants) is admitted with the parameters of its config; hostile variants are refused,
each with its message. Only the API server proves the policy on a cluster: its type
checking (status.typeChecking) and its CEL cost limits are not run here.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import celpy.evaluation
import pytest
import yaml

from steps.common.config import load_config
from tests.helpers import admission_policies as ap
from tests.helpers.admission_policies import PIPELINE, params_of
from tests.helpers.admission_workloads import ACCOUNT, base, policy, refusals, rendered
from tests.helpers.config_cases import CONFIG_VARIANTS, RDMA_ON_HOST_NETWORK, launcher_cases
from tests.helpers.paths import REPO_ROOT

CASES = launcher_cases([*CONFIG_VARIANTS, RDMA_ON_HOST_NETWORK])


@pytest.mark.parametrize(("name", "sets"), CASES)
def test_every_rendered_job_and_service_is_admitted(name: str, sets: list[str]) -> None:
    cfg = load_config(REPO_ROOT / "configs" / f"{name}.yaml", sets)
    for obj in rendered(cfg):
        assert refusals(obj, params_of(cfg)) == [], obj["kind"]


@pytest.mark.parametrize("name", ["cluster", "kind"])
def test_the_installed_parameters_are_the_configs(name: str) -> None:
    installed = yaml.safe_load((PIPELINE / "admission-params.yaml").read_text())
    cfg = load_config(REPO_ROOT / "configs" / f"{name}.yaml")
    assert installed["data"] == params_of(cfg)["data"]
    _, binding = policy()
    ref = binding["spec"]["paramRef"]
    assert (ref["name"], ref["namespace"]) == (installed["metadata"]["name"], "argo")
    assert ref["parameterNotFoundAction"] == "Deny"
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_policy_watches_what_the_workflows_account_creates() -> None:
    vap, binding = policy()
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert vap["spec"]["failurePolicy"] == "Fail"
    rules = {
        (r["apiGroups"][0], r["resources"][0])
        for r in vap["spec"]["matchConstraints"]["resourceRules"]
    }
    assert rules == {
        ("kubeflow.org", "pytorchjobs"),
        ("trainer.kubeflow.org", "trainjobs"),
        ("serving.kserve.io", "inferenceservices"),
    }
    for rule in vap["spec"]["matchConstraints"]["resourceRules"]:
        assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    rbac = list(yaml.safe_load_all((PIPELINE / "rbac.yaml").read_text()))
    (account,) = [d for d in rbac if d["kind"] == "ServiceAccount"]
    assert ACCOUNT.endswith(f":{account['metadata']['name']}")
    # another account (an administrator, a controller) is not this policy's concern
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml")
    job = privileged(rendered(cfg)[0])
    assert refusals(job, params_of(cfg), user="system:serviceaccount:argo:someone") == []
    assert refusals(job, params_of(cfg)) != []


def test_the_expressions_call_only_functions_both_cel_environments_have() -> None:
    vap, _ = policy()
    assert ap.calls(vap) == ap.CEL_MACROS | ap.CEL_FUNCTIONS - {"matches"}
    assert set(celpy.evaluation.base_functions) >= ap.CEL_FUNCTIONS
    assert not [e for e in ap.expressions(vap) if ".?" in e or "[?" in e]  # no optional types


# --- hostile variants -----------------------------------------------------------------


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    if obj["kind"] == "InferenceService":
        return [obj["spec"]["predictor"]]
    patch = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return [
        j["template"]["spec"]["template"].setdefault("spec", {}) for j in patch["replicatedJobs"]
    ]


def changed(obj: dict[str, Any], change) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    change(pod_specs(obj)[-1])
    return obj


def privileged(obj: dict[str, Any]) -> dict[str, Any]:
    def change(spec: dict[str, Any]) -> None:
        spec.setdefault("containers", [{"name": "node"}])[0].setdefault("securityContext", {})[
            "privileged"
        ] = True

    return changed(obj, change)


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    return spec.setdefault("containers", [{"name": "node"}])[0]


HOSTILE = {
    "another service account": (
        lambda s: s.update(serviceAccountName="argo-server"),
        "may run only as an allowed service account",
    ),
    "the workflow's account": (
        lambda s: s.update(serviceAccountName="cifar-pipeline"),
        "may run only as an allowed service account",
    ),
    "hostPath": (
        lambda s: s.setdefault("volumes", []).append({"name": "h", "hostPath": {"path": "/"}}),
        "no hostPath volume",
    ),
    "privileged": (
        lambda s: _container(s).setdefault("securityContext", {}).update(privileged=True),
        "no privileged container",
    ),
    "privilege escalation": (
        lambda s: (
            _container(s).setdefault("securityContext", {}).update(allowPrivilegeEscalation=True)
        ),
        "no container may allow privilege escalation",
    ),
    "a foreign image": (
        lambda s: _container(s).update(image="docker.io/evil/miner:1"),
        "every container image must be under the configured registry",
    ),
    "a look-alike registry": (
        lambda s: _container(s).update(image="ghcr.io/cifar-pipeline.evil.io/cifar-train:1"),
        "every container image must be under the configured registry",
    ),
    "a foreign init container": (
        lambda s: s.setdefault("initContainers", []).append({"name": "i", "image": "busybox"}),
        "every container image must be under the configured registry",
    ),
    "hostPID": (lambda s: s.update(hostPID=True), "no hostPID or hostIPC"),
    "hostIPC": (lambda s: s.update(hostIPC=True), "no hostPID or hostIPC"),
    "hostNetwork": (lambda s: s.update(hostNetwork=True), "hostNetwork only for the training"),
    "an added capability": (
        lambda s: (
            _container(s)
            .setdefault("securityContext", {})
            .update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})
        ),
        "no added capability but IPC_LOCK",
    ),
    "root": (
        lambda s: (
            _container(s).setdefault("securityContext", {}).update(runAsUser=0, runAsNonRoot=False)
        ),
        "no container runs as root",
    ),
    "a root pod": (
        lambda s: s.setdefault("securityContext", {}).update(runAsUser=0),
        "no container runs as root",
    ),
    "a token": (
        lambda s: s.update(automountServiceAccountToken=True),
        "automountServiceAccountToken: false",
    ),
}
# fields a TrainJob's runtime patch cannot carry (Trainer v2.3.0 PodSpecPatch: no image
# of its containers, no host namespaces, no token setting): the TrainJob's own checks below
NOT_IN_TRAINJOB_PATCH = {
    "a foreign image",
    "a look-alike registry",
    "hostPID",
    "hostIPC",
    "hostNetwork",
    "a token",
}


def hostile_cases():
    for kind in ("PyTorchJob", "TrainJob", "InferenceService"):
        for what in HOSTILE:
            if kind == "TrainJob" and what in NOT_IN_TRAINJOB_PATCH:
                continue
            yield pytest.param(kind, what, id=f"{kind}-{what}")


@pytest.mark.parametrize(("kind", "what"), hostile_cases())
def test_a_hostile_object_is_refused_with_its_message(kind: str, what: str) -> None:
    cfg, obj = base(kind)
    change, message = HOSTILE[what]
    found = refusals(changed(obj, change), params_of(cfg))
    assert found and all(message in m for m in found), found


@pytest.mark.parametrize("kind", ["PyTorchJob", "TrainJob"])
def test_rdma_and_host_network_open_exactly_their_fields(kind: str) -> None:
    """With rdmaRoot the training container may be root with IPC_LOCK, nothing more; with
    hostNetwork the training pods may use the node's network; the predictor neither."""
    cfg, obj = base(kind, "cluster.rdma=true", "cluster.host_network=true")
    params = params_of(cfg)
    assert params["data"]["rdmaRoot"] == "true" and params["data"]["hostNetwork"] == "true"
    assert refusals(obj, params) == []
    for what in ("an added capability", "privileged", "hostPath", "another service account"):
        assert refusals(changed(obj, HOSTILE[what][0]), params), what
    ipc = changed(
        obj,
        lambda s: (
            _container(s)
            .setdefault("securityContext", {})
            .update(
                capabilities={"drop": ["ALL"], "add": ["IPC_LOCK"]}, runAsUser=0, runAsNonRoot=False
            )
        ),
    )
    assert refusals(ipc, params) == []
    without = params_of(load_config(REPO_ROOT / "configs" / "cluster.yaml"))
    assert any("IPC_LOCK" in m for m in refusals(ipc, without))
    (_, _, service) = rendered(cfg)
    for what in ("hostNetwork", "root", "an added capability"):
        assert refusals(changed(service, HOSTILE[what][0]), params), what
    assert refusals(
        changed(
            service,
            lambda s: (
                _container(s)
                .setdefault("securityContext", {})
                .update(capabilities={"drop": ["ALL"], "add": ["IPC_LOCK"]})
            ),
        ),
        params,
    )


def test_a_trainjob_runs_on_the_pipelines_runtime_and_registry() -> None:
    cfg, job = base("TrainJob")
    params = params_of(cfg)
    other = copy.deepcopy(job)
    other["spec"]["runtimeRef"]["name"] = "torch-distributed"  # Trainer's own, its image
    image = copy.deepcopy(job)
    image["spec"]["trainer"]["image"] = "docker.io/pytorch/pytorch:2.9.1"
    for obj in (other, image):
        (message,) = refusals(obj, params)
        assert "pipeline's ClusterTrainingRuntime" in message


@pytest.mark.parametrize("field", ["model", "transformer", "explainer", "workerSpec", "sklearn"])
def test_a_service_is_a_predictor_of_its_own_containers(field: str) -> None:
    cfg, service = base("InferenceService")
    service = copy.deepcopy(service)
    where = (
        service["spec"] if field in ("transformer", "explainer") else service["spec"]["predictor"]
    )
    where[field] = {"storageUri": "s3://x"} if field != "transformer" else {"containers": []}
    (message,) = refusals(service, params_of(cfg))
    assert "predictor of its own containers" in message


def test_a_missing_field_errs_and_refuses() -> None:
    """An expression that reads an absent field errs: failurePolicy Fail refuses."""
    cfg, job = base("TrainJob")
    job = copy.deepcopy(job)
    del job["spec"]["runtimeRef"]
    found = refusals(job, params_of(cfg))
    assert found and all(m.startswith("error") for m in found)


# --- the allowed service accounts: a set in the parameters ------------------------------


@pytest.mark.parametrize("kind", ["PyTorchJob", "TrainJob", "InferenceService"])
def test_two_allowed_accounts_are_admitted_and_a_third_refused(kind: str) -> None:
    """Allowing an account is one params line, serviceAccount.<name>; the pods may run as
    any allowed one, and as no other."""
    cfg, obj = base(kind)
    params = params_of(cfg, accounts=("default", "s3-workload-identity"))
    for name in ("default", "s3-workload-identity"):
        named = changed(obj, lambda s, name=name: s.update(serviceAccountName=name))
        assert refusals(named, params) == [], name
    assert refusals(obj, params) == []  # no name: the default account
    for name in ("argo-server", "cifar-pipeline", "another"):
        named = changed(obj, lambda s, name=name: s.update(serviceAccountName=name))
        (message,) = refusals(named, params)
        assert "may run only as an allowed service account" in message, name
    deprecated = changed(obj, lambda s: s.update(serviceAccount="argo-server"))
    assert refusals(deprecated, params), "the deprecated serviceAccount field counts too"


def test_the_default_account_is_allowed_only_by_its_key() -> None:
    """A pod that names no account runs as the namespace's default: refused once the
    params no longer list it."""
    cfg, job = base("PyTorchJob")
    params = params_of(cfg, accounts=("s3-workload-identity",))
    (message,) = refusals(job, params)
    assert "may run only as an allowed service account" in message
    named = copy.deepcopy(job)
    for spec in pod_specs(named):  # Master and Worker
        spec["serviceAccountName"] = "s3-workload-identity"
    assert refusals(named, params) == []


def test_a_trainjob_with_a_second_runtime_patch_is_refused() -> None:
    """Only the first patch's pod specs are read (Kubernetes' CEL cannot flatten a list of
    lists): a second patch is refused outright, whatever it carries."""
    cfg, job = base("TrainJob")
    job = copy.deepcopy(job)
    second = copy.deepcopy(job["spec"]["runtimePatches"][0])
    second["manager"] = "someone-else"
    spec = second["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    spec["template"]["spec"]["template"]["spec"]["volumes"] = [
        {"name": "h", "hostPath": {"path": "/"}}
    ]
    job["spec"]["runtimePatches"].append(second)
    (message,) = refusals(job, params_of(cfg))
    assert "one runtime patch" in message
