"""`kubectl apply -k configs/cluster/` (and `configs/cluster/trainer/`) builds, offline, from
the vendored upstream manifests: the CRDs, the Deployments in their namespaces on pinned
images, our patches applied, and every object valid. The argo overlay's patches are also
built against a small stand-in for the release, so issue 21's defect 1 is caught with no
vendored tree at all."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.helpers import cluster_build
from tests.helpers.cluster_build import (
    CLUSTER,
    K8S_VERSION,
    kustomize,
    vendor,
)
from tests.helpers.cluster_install_steps import (
    CLUSTER_DOC,
)
from tests.helpers.k8s_refs import walk
from tests.helpers.paths import REPO_ROOT, SHARED

LATEST = re.compile(r"[\w.-]+/[\w./-]+:latest\b")


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize(
    ("build_of", "crd"),
    [
        ("cluster", "workflows.argoproj.io"),
        ("cluster", "workflowtemplates.argoproj.io"),
        ("cluster", "cronworkflows.argoproj.io"),
        ("cluster", "pytorchjobs.kubeflow.org"),
        ("cluster", "podgroups.scheduling.volcano.sh"),
        ("cluster", "queues.scheduling.volcano.sh"),
        ("trainer", "trainjobs.trainer.kubeflow.org"),
        ("trainer", "clustertrainingruntimes.trainer.kubeflow.org"),
        ("trainer", "jobsets.jobset.x-k8s.io"),
        ("kserve", "inferenceservices.serving.kserve.io"),
        ("kserve", "servingruntimes.serving.kserve.io"),
        ("kserve", "clusterservingruntimes.serving.kserve.io"),
        ("cert-manager", "certificates.cert-manager.io"),
        ("cert-manager", "issuers.cert-manager.io"),
    ],
)
def test_the_build_holds_the_crd(builds: dict, build_of: str, crd: str) -> None:
    find(builds[build_of], "CustomResourceDefinition", crd)


@pytest.mark.parametrize(
    ("build_of", "namespace", "name", "image"),
    [
        ("cluster", "argo", "workflow-controller", "quay.io/argoproj/workflow-controller:v4.0.5"),
        ("cluster", "argo", "argo-server", "quay.io/argoproj/argocli:v4.0.5"),
        (
            "cluster",
            "volcano-system",
            "volcano-scheduler",
            "docker.io/volcanosh/vc-scheduler:v1.14.4",
        ),
        (
            "cluster",
            "volcano-system",
            "volcano-controllers",
            "docker.io/volcanosh/vc-controller-manager:v1.14.4",
        ),
        (
            "cluster",
            "kubeflow",
            "training-operator",
            "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
        ),
        (
            "trainer",
            "kubeflow-system",
            "kubeflow-trainer-controller-manager",
            "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",
        ),
        (
            "trainer",
            "kubeflow-system",
            "jobset-controller-manager",
            "registry.k8s.io/jobset/jobset:v0.12.0",
        ),
        ("kserve", "kserve", "kserve-controller-manager", "kserve/kserve-controller:v0.19.0"),
        (
            "cert-manager",
            "cert-manager",
            "cert-manager",
            "quay.io/jetstack/cert-manager-controller:v1.17.0",
        ),
        (
            "cert-manager",
            "cert-manager",
            "cert-manager-cainjector",
            "quay.io/jetstack/cert-manager-cainjector:v1.17.0",
        ),
        (
            "cert-manager",
            "cert-manager",
            "cert-manager-webhook",
            "quay.io/jetstack/cert-manager-webhook:v1.17.0",
        ),
    ],
)
def test_the_deployment_runs_the_pinned_image_in_its_namespace(
    builds: dict, build_of: str, namespace: str, name: str, image: str
) -> None:
    deployment = find(builds[build_of], "Deployment", name)
    assert deployment["metadata"]["namespace"] == namespace
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image


@pytest.mark.parametrize("build_of", ["cluster", "scheduling", "trainer", "kserve", "cert-manager"])
def test_no_image_is_latest_or_untagged(builds: dict, build_of: str) -> None:
    """Not in a container, nor in an argument naming one (the Argo executor's)."""
    for doc in builds[build_of]:
        if doc["kind"] == "CustomResourceDefinition":
            continue  # schemas, whose descriptions mention ":latest"
        for node in walk(doc):
            for container in node.get("containers", []) + node.get("initContainers", []):
                name, _, tag = container["image"].rpartition(":")
                assert name and tag not in ("", "latest") and "/" not in tag, container["image"]
            for value in node.values():
                for text in value if isinstance(value, list) else [value]:
                    assert not (isinstance(text, str) and LATEST.search(text)), text


def test_argo_runs_our_auth_mode_executor_and_artifact_repository(builds: dict) -> None:
    docs = builds["cluster"]
    server = find(docs, "Deployment", "argo-server")["spec"]["template"]["spec"]["containers"][0]
    # client mode (issue 38 item 6): every caller brings its own token; server mode only in
    # the single-user overlay (test_the_single_user_overlay_changes_the_auth_mode_alone)
    assert server["args"] == ["server", "--auth-mode=client"]
    controller = find(docs, "Deployment", "workflow-controller")["spec"]["template"]["spec"]
    assert (
        "--executor-image=quay.io/argoproj/argoexec:v4.0.5" in controller["containers"][0]["args"]
    )
    config = find(docs, "ConfigMap", "workflow-controller-configmap")
    assert config["metadata"]["namespace"] == "argo"
    s3 = yaml.safe_load(config["data"]["artifactRepository"])["s3"]
    assert (s3["bucket"], s3["endpoint"]) == ("argo-artifacts", "seaweedfs.seaweedfs.svc:8333")


def test_the_training_operator_is_started_for_volcano(builds: dict) -> None:
    operator = find(builds["cluster"], "Deployment", "training-operator")
    spec = operator["spec"]["template"]["spec"]
    assert spec["containers"][0]["args"] == [
        "--gang-scheduler-name=volcano",
        # the Workers' init container fit for Pod Security restricted, from its ConfigMap
        "--pytorch-init-container-template-file=/etc/pytorch-init-container/initContainer.yaml",
    ]
    (mount,) = [
        m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "pytorch-init-container"
    ]
    assert mount["mountPath"] == "/etc/pytorch-init-container"
    (volume,) = [v for v in spec["volumes"] if v["name"] == "pytorch-init-container"]
    config = find(builds["cluster"], "ConfigMap", volume["configMap"]["name"])
    assert config["metadata"]["namespace"] == "kubeflow" and "initContainer.yaml" in config["data"]


def test_trainer_objects_are_in_kubeflow_system_and_jobset_has_no_namespace_of_its_own(
    builds: dict,
) -> None:
    docs = builds["trainer"]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == ["kubeflow-system"]
    namespaces = {d["metadata"].get("namespace") for d in docs}
    assert namespaces == {None, "kubeflow-system"}
    public = find(docs, "ConfigMap", "kubeflow-trainer-public")
    assert public["data"] == {"kubeflow_trainer_version": "v2.3.0"}


@pytest.mark.parametrize("build_of", ["cluster", "scheduling", "trainer", "kserve", "cert-manager"])
def test_every_built_object_passes_strict_validation(builds: dict, build_of: str) -> None:
    """Kubernetes' own kinds against its schemas; any other object must be of a kind that a
    CRD of the builds serves (the Trainer runtime: validated in tests/test_cluster.py)."""
    served = {
        (d["spec"]["group"], d["spec"]["names"]["kind"])
        for docs in builds.values()
        for d in docs
        if d["kind"] == "CustomResourceDefinition"
    }
    for doc in builds[build_of]:
        if (doc["apiVersion"].rpartition("/")[0], doc["kind"]) not in served:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kserve_runs_standard_mode_without_ingress_and_pins_every_image(builds: dict) -> None:
    """What the controller reads from inferenceservice-config (kserve v0.19.0
    pkg/apis/serving/v1beta1/configmap.go): Standard mode for a service without the
    annotation, no Ingress or VirtualService made, every image it would start at v0.19.0."""
    config = find(builds["kserve"], "ConfigMap", "inferenceservice-config")
    assert config["metadata"]["namespace"] == "kserve" and "_example" not in config["data"]
    data = {k: json.loads(v) for k, v in config["data"].items()}
    assert data["deploy"] == {"defaultDeploymentMode": "Standard"}
    assert data["ingress"]["disableIngressCreation"] is True
    assert data["ingress"]["disableIstioVirtualHost"] is True
    images = [v["image"] for v in data.values() if isinstance(v, dict) and "image" in v]
    assert len(images) >= 5 and all(i.endswith(":v0.19.0") for i in images), images
    assert data["explainers"]["art"]["defaultImageVersion"] == "v0.19.0"
    storage = find(builds["kserve"], "ClusterStorageContainer", "default")
    assert storage["spec"]["container"]["image"] == "kserve/storage-initializer:v0.19.0"


def test_kserves_custom_objects_pass_their_crds(builds: dict) -> None:
    """Every non-CRD object of the KServe build whose kind a CRD defines, against that
    CRD's schema, strictly: KServe's own (ClusterStorageContainer) and cert-manager's
    (the webhook's Certificate and its Issuer, against cert-manager v1.17.0's CRDs)."""
    crds = [
        d
        for docs in (builds["kserve"], builds[cluster_build.CERT_MANAGER])
        for d in docs
        if d["kind"] == "CustomResourceDefinition"
    ]
    by_kind = {(c["spec"]["group"], c["spec"]["names"]["kind"]): c for c in crds}
    checked = set()
    for doc in builds["kserve"]:
        group, _, version = doc["apiVersion"].rpartition("/")
        crd = by_kind.get((group, doc["kind"]))
        if crd is None or doc["kind"] == "CustomResourceDefinition":
            continue
        (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
        schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])
        schema["properties"]["metadata"] = {"type": "object"}
        jsonschema.validate(doc, cluster_build.strict_schema(schema))
        checked.add(doc["kind"])
    assert checked == {"Certificate", "Issuer", "ClusterStorageContainer"}


def test_the_inferenceservice_schema_the_tests_use_is_the_one_installed(builds: dict) -> None:
    """../shared/schemas (what validate_manifests.py checks the pipeline's services with)
    against the CRD configs/cluster/kserve installs."""
    shared = SHARED / "schemas" / "serving.kserve.io_inferenceservices.yaml"
    if not shared.is_file():
        pytest.skip("../shared (the schemas) is absent")
    installed = find(
        builds["kserve"], "CustomResourceDefinition", "inferenceservices.serving.kserve.io"
    )
    wanted = yaml.load(shared.read_text(), Loader=yaml.CSafeLoader)
    assert [v["schema"] for v in installed["spec"]["versions"]] == [
        v["schema"] for v in wanted["spec"]["versions"]
    ]


# A stand-in for the release's manifests/cluster-install, as the release's install.yaml has
# its objects: already in namespace argo (argoproj/argo-workflows v4.0.5,
# manifests/cluster-install-no-crds/kustomization.yaml sets it), images at :latest in source.
RELEASE_STAND_IN = [
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "workflow-controller-configmap", "namespace": "argo"},
    },
    *(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "argo"},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "containers": [
                            {
                                "name": name,
                                "image": f"quay.io/argoproj/{image}:latest",
                                "args": args,
                            }
                        ]
                    },
                },
            },
        }
        for name, image, args in (
            ("argo-server", "argocli", ["server"]),
            ("workflow-controller", "workflow-controller", []),
        )
    ),
]


def test_the_argo_overlay_patches_a_release_whose_objects_are_namespaced(tmp_path: Path) -> None:
    """Issue 21, defect 1: a ConfigMap patch without ``metadata.namespace`` matches nothing
    here ("no resource matches strategic merge patch ... [noNs]")."""
    shutil.copytree(CLUSTER / "argo", tmp_path / "argo")
    release = tmp_path / "vendor" / "argo" / "manifests" / "cluster-install"
    release.mkdir(parents=True)
    (release / "install.yaml").write_text(yaml.safe_dump_all(RELEASE_STAND_IN))
    (release / "kustomization.yaml").write_text("resources: [install.yaml]\n")
    docs = kustomize(tmp_path / "argo")
    config = find(docs, "ConfigMap", "workflow-controller-configmap")
    assert yaml.safe_load(config["data"]["artifactRepository"])["s3"]["bucket"] == "argo-artifacts"
    server = find(docs, "Deployment", "argo-server")["spec"]["template"]["spec"]["containers"][0]
    assert (server["image"], server["args"]) == (
        "quay.io/argoproj/argocli:v4.0.5",
        ["server", "--auth-mode=client"],
    )
    controller = find(docs, "Deployment", "workflow-controller")["spec"]["template"]["spec"]
    assert controller["containers"][0]["image"] == "quay.io/argoproj/workflow-controller:v4.0.5"
    assert controller["containers"][0]["args"] == [
        "--executor-image=quay.io/argoproj/argoexec:v4.0.5"
    ]


def test_cert_manager_renders_as_its_release_and_the_rollout_waits_for_each_deployment(
    builds: dict,
) -> None:
    """The rendered manifest is the release's shape (make/manifests.mk at v1.17.0): the
    namespace first, every CRD of the chart, no startupapicheck Job nor any helm hook
    (kubectl apply would run a hook at once), everything in cert-manager (or kube-system,
    its leader-election Roles); and docs/cluster.md and e2e wait for exactly its Deployments
    before KServe, whose webhook certificate they issue."""
    docs = builds[cluster_build.CERT_MANAGER]
    assert (docs[0]["kind"], docs[0]["metadata"]["name"]) == ("Namespace", "cert-manager")
    plurals = {
        d["spec"]["names"]["plural"] for d in docs if d["kind"] == "CustomResourceDefinition"
    }
    locked = {
        e.path.removeprefix("deploy/crds/crd-").removesuffix(".yaml")
        for e in vendor.read_lock(vendor.LOCK)
        if e.component == "cert-manager" and e.path.startswith("deploy/crds/")
    }
    assert plurals == locked and len(plurals) == 6
    assert not [d for d in docs if d["kind"] in ("Job", "Pod")]
    for doc in docs:
        annotations = doc["metadata"].get("annotations") or {}
        assert not [a for a in annotations if a.startswith("helm.sh/hook")], doc["metadata"]
        assert doc["metadata"].get("namespace") in (None, "cert-manager", "kube-system"), doc
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    rollout = re.compile(r"kubectl -n cert-manager rollout status ((?:deploy/[\w-]+ ?)+)")
    guide = CLUSTER_DOC.read_text()
    e2e = (REPO_ROOT / ".github" / "workflows" / "e2e.yml").read_text()
    for text in (guide, e2e):
        (waited,) = rollout.findall(text)
        assert {w.removeprefix("deploy/") for w in waited.split()} == deployments


# Volcano v1.14.4: the scheduler's actions (pkg/scheduler/actions/) that honour the
# promises of configs/cluster/scheduling/: reclaim takes back resources from a queue over
# its share whose Queue is reclaimable (plugins/proportion ReclaimableFn), preempt evicts
# pods of lower-priority jobs in a queue (plugins/priority PreemptableFn); the release's
# installer/volcano-development.yaml runs "enqueue, allocate, backfill" only.
VOLCANO_CONF = "volcano-scheduler.conf"
PROMISED = {"reclaim": "proportion", "preempt": "priority"}  # action -> plugin it asks


def scheduler_conf(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    config = find(list(docs), "ConfigMap", "volcano-scheduler-configmap")
    assert config["metadata"]["namespace"] == "volcano-system"
    return yaml.safe_load(config["data"][VOLCANO_CONF])


def test_volcano_schedules_with_the_actions_the_scheduling_layer_promises(builds: dict) -> None:
    """Issue 30, defect 9: the Queue's ``reclaimable: true`` and the PriorityClass's
    preemption did nothing under the release's actions. The built conf is the release's
    with reclaim and preempt added (the plugins those actions ask are in its tiers)."""
    conf = scheduler_conf(builds["cluster"])
    actions = [a.strip() for a in conf["actions"].split(",")]
    plugins = {p["name"] for tier in conf["tiers"] for p in tier["plugins"]}
    for action, plugin in PROMISED.items():
        assert action in actions and plugin in plugins, (action, conf["actions"])
    release = [
        d
        for d in yaml.load_all(
            (
                cluster_build.vendor_source() / "volcano/installer/volcano-development.yaml"
            ).read_text(),
            Loader=yaml.CSafeLoader,
        )
        if d
    ]
    upstream = scheduler_conf(tuple(release))
    assert conf["tiers"] == upstream["tiers"]
    assert [a for a in actions if a not in PROMISED] == [
        a.strip() for a in upstream["actions"].split(",")
    ]
    scheduling = {d["kind"]: d for d in builds["scheduling"]}
    assert scheduling["Queue"]["spec"]["reclaimable"] is True
    assert scheduling["PriorityClass"]["preemptionPolicy"] == "PreemptLowerPriority"


def test_the_kserve_crds_layer_is_the_kserve_layers_crds(builds: dict) -> None:
    crds = [d for d in builds["kserve"] if d["kind"] == "CustomResourceDefinition"]
    assert list(builds["kserve-crds"]) == crds and len(crds) == 6


def test_the_single_user_overlay_changes_the_auth_mode_alone(builds: dict) -> None:
    """configs/cluster-single-user: the whole install with the argo-server in
    server mode (a one-person kind cluster), and nothing else changed; one --auth-mode, so
    client mode is not left on beside it (Argo v4.0.5 cmd/argo/commands/server.go: a
    StringArray flag, each value one more mode)."""
    overlay = cluster_build.vendored_overlays()["single-user"]
    base = list(builds["cluster"])
    assert len(overlay) == len(base)
    server = find(list(overlay), "Deployment", "argo-server")
    assert server["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "server",
        "--auth-mode=server",
    ]
    changed = copy.deepcopy(server)
    changed["spec"]["template"]["spec"]["containers"][0]["args"][1] = "--auth-mode=client"
    assert changed == find(base, "Deployment", "argo-server")
    others = [d for d in overlay if d is not server]
    assert sorted(map(json.dumps, others), key=str) == sorted(
        (
            json.dumps(d)
            for d in base
            if d["metadata"]["name"] != "argo-server" or d["kind"] != "Deployment"
        ),
        key=str,
    )
