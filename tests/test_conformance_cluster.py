"""configs/cluster against what the pipeline does on a cluster: every account has the verbs
its component uses (computed from the built RBAC with tests.helpers.k8s_rbac), the argo-server is
reachable from no pod, and every object a rendered workflow or job names exists in the
build or is one docs/cluster.md has the user create (``optional`` where it says so).

Offline: the repository's layers are built with ``kubectl kustomize`` and the upstream facts
are the cited constants of tests.helpers.cluster_build; the last test checks those constants against
the vendored upstream manifests whenever a checkout has them.
"""

from __future__ import annotations

import copy
import shlex
from functools import cache
from typing import Any

import jsonschema
import pytest
import yaml
from hera.workflows import WorkflowTemplate

from flows import cifar
from flows.manifests import inferenceservice as isvc
from flows.manifests.shared_pod import config_args, pod_env, predictor_env
from flows.pipeline.serving_templates import serving_templates
from steps.common.config import PipelineConfig, load_config
from tests.helpers import cluster_build as cb
from tests.helpers import k8s_refs as refs
from tests.helpers.cluster_install_steps import cluster_commands, rendered_runtime
from tests.helpers.flow_helpers import run_of
from tests.helpers.k8s_rbac import Rbac, Request, ServiceAccount
from tests.helpers.paths import REPO_ROOT

CONFIGS = ["local", "smoke", "cluster", "kind"]
LAUNCHERS = ["pytorchjob", "trainjob"]
# Created by hand as docs/cluster.md says (kind, namespace, name): optional?
# Every Secret is required: each role's own credentials (configs/cluster/secrets.example.yaml).
HAND_MADE = {
    ("Secret", "seaweedfs", "seaweedfs-jwt"): False,
    ("Secret", "seaweedfs", "seaweedfs-admin"): False,
    ("Secret", "seaweedfs", "seaweedfs-steps"): False,
    ("Secret", "seaweedfs", "seaweedfs-mlflow"): False,
    ("Secret", "seaweedfs", "seaweedfs-predictor"): False,
    ("Secret", "argo", "cifar-s3"): False,
    ("Secret", "argo", "cifar-predictor-s3"): False,
    ("Secret", "argo", "cifar-mlflow"): False,
    ("Secret", "argo", "cifar-predictor-mlflow"): False,
    ("Secret", "mlflow", "mlflow-s3"): False,
    ("Secret", "mlflow", "mlflow-admin"): False,
    ("Secret", "mlflow", "mlflow-pipeline-user"): False,
    ("Secret", "mlflow", "mlflow-predictor-user"): False,
}


@cache
def own() -> tuple[dict[str, Any], ...]:
    return tuple(cb.own_objects())


def config(name: str, launcher: str = "pytorchjob") -> PipelineConfig:
    return load_config(REPO_ROOT / "configs" / f"{name}.yaml", [f"train.launcher={launcher}"])


def rendered(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """The WorkflowTemplate a cluster runs, the Workflow a run of it executes (the
    submission joined with it, the parameters' defaults filled in), and the serving
    templates (deploy, rollbacks) as a WorkflowTemplate of their own, whether or not the
    pipeline's DAG holds them yet."""
    with WorkflowTemplate(
        name="serving", entrypoint="deploy", namespace=cfg.cluster.namespace
    ) as wt:
        serving_templates(cfg, config_args(cfg))
    return [cifar.build_template(cfg).to_dict(), run_of(cfg), wt.to_dict()]


@cache
def install_rendered() -> tuple[dict[str, Any], ...]:
    """What docs/cluster.md renders from a config and applies (the ClusterTrainingRuntime)."""
    found = []
    for command in cluster_commands():
        if "--render-runtime" in command:
            words = shlex.split(command.split("|")[0])
            config = words[words.index("--config") + 1]
            found.append(rendered_runtime(config, []))
    return tuple(found)


def created() -> set[tuple[str, str | None, str]]:
    return {refs.key_of(doc) for doc in [*own(), *install_rendered()]}


def rbac(*extra: dict[str, Any]) -> Rbac:
    return Rbac([*own(), *extra])


# --- RBAC coverage ----------------------------------------------------------------------


@pytest.mark.parametrize("verb", cb.MEMO_CACHE_VERBS)
@pytest.mark.parametrize("name", ["cluster", "kind"])
def test_the_controller_may_write_the_memoization_cache(name: str, verb: str) -> None:
    c = config(name).cluster
    cache_name = None if verb == "create" else c.cache_configmap  # a create names nothing
    request = Request(verb, "", "configmaps", c.namespace, cache_name)
    assert rbac(*cb.upstream_controller_rbac()).allows(cb.CONTROLLER, request), (
        f"the workflow controller ({cb.CONTROLLER}) may not {verb} ConfigMap "
        f"{c.namespace}/{c.cache_configmap}: memoized steps would never be saved"
    )


def test_the_controller_may_update_no_other_configmap() -> None:
    request = Request(
        "update", "", "configmaps", cb.ARGO_NAMESPACE, "workflow-controller-configmap"
    )
    assert not rbac(*cb.upstream_controller_rbac()).allows(cb.CONTROLLER, request)


def _resource_requests(cfg: PipelineConfig) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the resource templates of the rendered workflow send."""
    wanted = set()
    for doc in rendered(cfg):
        for template in doc["spec"]["templates"]:
            if "resource" not in template:
                continue
            resource = template["resource"]
            action = resource["action"]
            # a delete without a manifest names its kind in its flags, and the object by
            # name or by --selector; a create or apply, in its manifest
            manifest = refs.template_manifest(template)
            if manifest is None:
                kind = cb.KINDS_BY_RESOURCE[resource["flags"][0]]
                if "--selector" not in resource["flags"]:
                    action = f"{action}-by-name"
            else:
                kind = manifest["kind"]
            assert action in cb.RESOURCE_VERBS, f"{action}: extend the verbs table"
            group, plural = cb.RESOURCES[kind]
            wanted |= {(group, plural, verb) for verb in cb.RESOURCE_VERBS[action]}
            wanted |= _owner_requests(manifest, group, plural)
        if doc["spec"].get("artifactGC") or any(
            a.get("artifactGC") for t in doc["spec"]["templates"] for a in _artifacts(t)
        ):
            wanted |= {(g, r, v) for (g, r), verbs in cb.ARTIFACT_GC_NEEDS.items() for v in verbs}
    return wanted


def _owner_requests(
    manifest: dict[str, Any] | None, group: str, plural: str
) -> set[tuple[str, str, str]]:
    """What OwnerReferencesPermissionEnforcement asks of whoever creates ``manifest``
    (tests.helpers.cluster_build.OWNED_VERB and OWNER_FINALIZERS_VERB)."""
    owners = ((manifest or {}).get("metadata") or {}).get("ownerReferences") or []
    wanted = {(group, plural, cb.OWNED_VERB)} if owners else set()
    for owner in owners:
        if owner.get("blockOwnerDeletion"):
            owner_group = owner["apiVersion"].rpartition("/")[0]
            owner_plural = cb.OWNER_RESOURCES[(owner_group, owner["kind"])]
            wanted.add((owner_group, f"{owner_plural}/finalizers", cb.OWNER_FINALIZERS_VERB))
    return wanted


def _artifacts(template: dict[str, Any]) -> list[dict[str, Any]]:
    return (template.get("outputs") or {}).get("artifacts") or []


def needed(*names: str) -> set[tuple[str, str, str]]:
    """What the executor (and the artifact GC pod) does under the workflow's account, for
    these configs with either launcher."""
    wanted = {(g, r, v) for (g, r), verbs in cb.EXECUTOR_NEEDS.items() for v in verbs}
    for name in names:
        for launcher in LAUNCHERS:
            wanted |= _resource_requests(config(name, launcher))
    return wanted


@pytest.mark.parametrize("name", CONFIGS)
def test_the_workflow_account_may_do_what_its_pods_do(name: str) -> None:
    c = config(name).cluster
    account = ServiceAccount(c.namespace, c.service_account)
    for group, resource, verb in sorted(needed(name)):
        target = None if verb == "create" else "cifar-train-x"
        assert rbac().allows(account, Request(verb, group, resource, c.namespace, target)), (
            f"{account} may not {verb} {resource}.{group}"
        )


def test_the_workflow_account_has_nothing_more() -> None:
    c = PipelineConfig().cluster
    account = ServiceAccount(c.namespace, c.service_account)
    assert rbac().grants(account, c.namespace) == needed(*CONFIGS)
    for verb in ("get", "list", "watch"):
        assert not rbac().allows(account, Request(verb, "", "secrets", c.namespace, "cifar-s3"))
    assert rbac().cluster_bindings_of(account) == []
    others = {d["metadata"].get("namespace") for d in own()} - {c.namespace, None}
    assert others and all(rbac().rules(account, ns) == [] for ns in others)


# --- argo-server exposure -----------------------------------------------------------------


def test_no_pod_reaches_the_argo_server() -> None:
    """argo-server runs --auth-mode=server: reaching :2746 means acting as its account,
    which may get and create Secrets everywhere. Port-forward and the kubelet's probe come
    from the pod's node, which NetworkPolicy always admits."""
    policies = [
        d
        for d in cb.local_layer("argo")
        if d["kind"] == "NetworkPolicy"
        and d["metadata"]["namespace"] == cb.ARGO_NAMESPACE
        and set(d["spec"]["podSelector"].get("matchLabels", {}).items())
        <= set(cb.ARGO_SERVER_POD_LABELS.items())
        and not d["spec"]["podSelector"].get("matchExpressions")
    ]
    assert policies, "no NetworkPolicy selects the argo-server pods"
    assert any("Ingress" in p["spec"].get("policyTypes", ["Ingress"]) for p in policies)
    assert [rule for p in policies for rule in p["spec"].get("ingress") or []] == []


# --- what the config names exists -------------------------------------------------------


CASES = [
    pytest.param(name, launcher, id=f"{name}-{launcher}")
    for name in CONFIGS
    for launcher in LAUNCHERS
]


@pytest.mark.parametrize(("name", "launcher"), CASES)
def test_every_object_a_workflow_names_exists(name: str, launcher: str) -> None:
    known = created() | set(HAND_MADE)
    for doc in rendered(config(name, launcher)):
        missing = sorted(r.key for r in refs.references(doc) if r.key not in known)
        assert not missing, f"{name}: named but not created by configs/cluster: {missing}"


@pytest.mark.parametrize(("name", "launcher"), CASES)
def test_optional_secrets_are_referenced_optional(name: str, launcher: str) -> None:
    for doc in rendered(config(name, launcher)):
        for ref in refs.references(doc):
            if HAND_MADE.get(ref.key):
                assert ref.optional, f"{ref.name} is optional (docs/cluster.md), not optional: true"


def test_every_object_the_build_names_exists() -> None:
    known = created() | set(HAND_MADE)
    for doc in [*own(), *cb.own_patches()]:
        missing = sorted(r.key for r in refs.references(doc) if r.key not in known)
        assert not missing, f"{refs.key_of(doc)} names {missing}"


def test_the_cluster_page_has_the_user_create_each_hand_made_object() -> None:
    guide = (REPO_ROOT / "docs" / "cluster.md").read_text()
    section = guide[guide.index("## Install, step by step") :]
    example = (cb.CLUSTER / "secrets.example.yaml").read_text()
    shapes = {
        (d["kind"], d["metadata"]["namespace"], d["metadata"]["name"])
        for d in yaml.safe_load_all(example)
    }
    assert shapes == set(HAND_MADE)
    for (_, namespace, name), optional in HAND_MADE.items():
        (line,) = [ln for ln in section.splitlines() if f"create secret generic {name} " in ln]
        assert f"-n {namespace} " in line, line
        assert line.lstrip().startswith("#") is optional, f"optional: {optional}: {line}"


# --- the Queue and the PriorityClass ----------------------------------------------------


@pytest.mark.slow
def test_the_queue_is_valid_and_opens() -> None:
    (queue,) = [d for d in own() if d["kind"] == "Queue"]
    crd = cb.queue_crd()
    if crd is None:
        pytest.skip(f"Volcano's Queue CRD comes with the vendored install: {cb.POPULATE}")
    assert crd["spec"]["scope"] == "Cluster" and "namespace" not in queue["metadata"]
    (version,) = [
        v for v in crd["spec"]["versions"] if v["name"] == queue["apiVersion"].split("/")[1]
    ]
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    jsonschema.validate(queue, cb.strict_schema(schema))
    assert "status" not in queue  # Volcano's queue controller opens a queue with no state


def test_the_priority_class_ranks_above_unclassed_pods_only() -> None:
    (priority,) = [d for d in own() if d["kind"] == "PriorityClass"]
    # user classes stay at or below 1e9; above is the system's (scheduling.k8s.io/v1 docs)
    assert 0 < priority["value"] <= 1_000_000_000
    assert priority.get("globalDefault") is False  # only the jobs that name it


# --- the cited constants against the upstream manifests, when vendored --------------------


def test_upstream_facts_hold_in_vendored_manifests() -> None:
    upstream = cb.vendored_objects()
    if upstream is None:
        pytest.skip(f"no vendored upstream manifests: {cb.POPULATE}")
    by_name = {(d["kind"], d["metadata"].get("name")): d for d in upstream}
    role = by_name[("ClusterRole", cb.CONTROLLER_CLUSTER_ROLE)]
    verbs = {
        v
        for r in role["rules"]
        if "" in r.get("apiGroups", []) and "configmaps" in r.get("resources", [])
        for v in r["verbs"]
    }
    assert verbs == set(cb.CONTROLLER_CONFIGMAP_VERBS)
    assert Rbac.binds(by_name[("ClusterRoleBinding", cb.CONTROLLER_CLUSTER_BINDING)], cb.CONTROLLER)
    controller = by_name[("Deployment", "workflow-controller")]["spec"]["template"]["spec"]
    assert controller["serviceAccountName"] == cb.CONTROLLER.name
    server = by_name[("Deployment", "argo-server")]["spec"]["template"]
    assert cb.ARGO_SERVER_POD_LABELS.items() <= server["metadata"]["labels"].items()
    assert server["spec"]["serviceAccountName"] == cb.ARGO_SERVER.name
    ports = {p["containerPort"] for c in server["spec"]["containers"] for p in c.get("ports", [])}
    assert cb.ARGO_SERVER_PORT in ports
    full = Rbac([*upstream, *own()])
    secret = Request("get", "", "secrets", "kube-system", "any")
    assert full.allows(cb.ARGO_SERVER, secret)  # why no pod may reach it
    c = PipelineConfig().cluster
    for verb in cb.MEMO_CACHE_VERBS:
        name = None if verb == "create" else c.cache_configmap
        assert full.allows(cb.CONTROLLER, Request(verb, "", "configmaps", c.namespace, name))
    account = ServiceAccount(c.namespace, c.service_account)
    assert full.grants(account, c.namespace) == needed(*CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_the_serving_pods_name_only_hand_made_secrets(name: str) -> None:
    """The cifar-serve pods (the InferenceService's predictor) reference the predictor's own
    Secrets (flows.manifests.shared_pod.predictor_env), in the namespace the service lives in, and
    none of the steps' (pod_env): the pod that serves the world holds no key that writes."""
    cfg = config(name)
    service = isvc.build_inferenceservice(cfg, model_uri="models:/m/1", labels={})
    found = {r.key for r in refs.references(service)}
    ns = cfg.cluster.namespace
    wanted = {("Secret", ns, spec.secret) for spec in predictor_env(cfg) if spec.secret}
    assert found == wanted and found <= set(HAND_MADE), found
    steps = {("Secret", ns, spec.secret) for spec in pod_env(cfg) if spec.secret}
    assert not found & steps, found & steps
    if name in ("cluster", "kind"):  # on the cluster: the predictor's read-only identities
        assert found == {
            ("Secret", ns, "cifar-predictor-s3"),
            ("Secret", ns, "cifar-predictor-mlflow"),
        }


# kserve v0.19.0 config/rbac/service_account.yaml and role.yaml (ClusterRole
# kserve-manager-role, bound by role_binding.yaml): what its controller does in the
# service's namespace for a Standard-mode InferenceService (controller.go Reconcile: the
# finalizer, the status; reconcilers/raw: the predictor's Deployment and Service, an HPA
# when its replicas may vary; PropagateModelStatus lists the pods).
KSERVE_CONTROLLER = ServiceAccount("kserve", "kserve-controller-manager")
KSERVE_NEEDS = [
    ("serving.kserve.io", "inferenceservices", "patch"),
    ("serving.kserve.io", "inferenceservices/status", "update"),
    ("apps", "deployments", "create"),
    ("apps", "deployments", "update"),
    ("", "services", "create"),
    ("autoscaling", "horizontalpodautoscalers", "create"),
    ("", "pods", "list"),
]


@pytest.mark.parametrize(("group", "resource", "verb"), KSERVE_NEEDS)
def test_kserve_may_run_the_service_where_the_workflow_applies_it(
    group: str, resource: str, verb: str
) -> None:
    upstream = cb.vendored_objects()
    if upstream is None:
        pytest.skip(f"no vendored upstream manifests: {cb.POPULATE}")
    namespace = PipelineConfig().cluster.namespace  # serving.name lives in cluster.namespace
    name = None if verb in ("create", "list") else "cifar10-classifier"
    request = Request(verb, group, resource, namespace, name)
    assert Rbac([*upstream, *own()]).allows(KSERVE_CONTROLLER, request), request
