"""The install's NetworkPolicies (issue 38 item 3), evaluated as the Kubernetes API defines
them (tests/helpers/k8s_netpol.py) over every namespace the built install creates and every pod a
rendered workflow starts (tests/helpers/cluster_pods.py): default deny everywhere, every
connection the pipeline makes allowed, and every pod of another namespace refused at every
SeaweedFS and MLflow port and at the training ranks' rendezvous port. The evaluator itself
is tested on the examples of kubernetes/website content/en/docs/concepts/
services-networking/network-policies.md.

Only a cluster whose network plugin enforces NetworkPolicy proves them on the wire; the
e2e run on kind (kindnet enforces NetworkPolicy since kind v0.24) runs the pipeline under
them.
"""

from __future__ import annotations

import copy
import itertools
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from steps.common.config import PipelineConfig, load_config
from tests.helpers import cluster_build
from tests.helpers import k8s_refs as refs
from tests.helpers.cluster_pods import workflow_pods
from tests.helpers.config_cases import CONFIG_VARIANTS, launcher_cases
from tests.helpers.k8s_netpol import Cluster, Pod
from tests.helpers.paths import REPO_ROOT

API_SERVER = "172.18.0.3"  # a control-plane node's address: no pod
WEB = "151.101.1.1"  # an address on the internet
# S3 first; then the master, filer and volume servers, and the S3 gateway's gRPC port
# (18333: its identity RPCs, PutIdentity among them, check no credential in SeaweedFS 4.48,
# weed/s3api/s3api_server_grpc.go), which listens on the pod's address
SEAWEEDFS_PORTS = (8333, 9333, 19333, 8888, 18888, 8080, 18080, 18333)
INTERNAL_PORTS = SEAWEEDFS_PORTS[1:]
RENDEZVOUS = {"PyTorchJob": 23456, "TrainJob": 29400}  # MASTER_PORT; torchrun's c10d
NCCL_PORT = 43117  # NCCL and gloo pick their own ports
CASES = launcher_cases(CONFIG_VARIANTS)


# --- the install --------------------------------------------------------------------------


def install(
    builds: dict, *, ipblocks_match_pods: bool = False, pipeline: list | None = None
) -> Cluster:
    """The built install; ``pipeline``: the pipeline layer's objects built otherwise (a
    setting edited), in place of the built ones."""
    docs = [d for docs in builds.values() for d in docs]
    if pipeline is not None:
        replaced = {refs.key_of(d): d for d in pipeline}
        assert replaced.keys() <= {refs.key_of(d) for d in docs}
        docs = [replaced.get(refs.key_of(d), d) for d in docs]
    namespaces = {
        d["metadata"]["name"]: d["metadata"].get("labels") or {}
        for d in docs
        if d["kind"] == "Namespace"
    }
    namespaces |= {"kube-system": {}, "intruder": {}, "default": {}}
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    return Cluster(namespaces, policies, ipblocks_match_pods=ipblocks_match_pods)


def installed_pods(builds: dict) -> dict[str, Pod]:
    """The pods of the install's Deployments and Jobs, by name."""
    found = {}
    for docs in builds.values():
        for d in docs:
            if d["kind"] in ("Deployment", "Job"):
                template = d["spec"]["template"]
                ports = {
                    (p["name"], p.get("protocol", "TCP")): p["containerPort"]
                    for c in template["spec"]["containers"]
                    for p in c.get("ports", [])
                    if "name" in p
                }
                labels = (template.get("metadata") or {}).get("labels") or {}
                found[d["metadata"]["name"]] = Pod(
                    d["metadata"]["namespace"], d["metadata"]["name"], labels, ports=ports
                )
    return found


DNS = Pod("kube-system", "coredns", {"k8s-app": "kube-dns"}, ip="10.244.9.9")


def run_pods(cfg: PipelineConfig) -> dict[str, Pod]:
    pods = {}
    for i, pod in enumerate(workflow_pods(cfg)):
        spec = pod["spec"]
        pods[pod["name"]] = Pod(
            cfg.cluster.namespace,
            pod["name"],
            pod["labels"],
            ip=f"10.244.1.{i + 1}",
            host_network=bool(spec.get("hostNetwork")),
            node_ip=f"172.18.0.{10 + i}",
        )
    return pods


def test_every_namespace_the_install_creates_denies_by_default(builds) -> None:
    cluster = install(builds)
    created = {n for n in cluster.namespaces if n not in ("kube-system", "intruder", "default")}
    assert created >= {"argo", "seaweedfs", "mlflow", "kubeflow", "kubeflow-system", "kserve"}
    assert "cert-manager" in created  # kserve/ carries its policies
    for namespace in created:
        anyone = Pod(namespace, "new", {"some": "pod"})
        assert cluster.isolated(anyone, "Ingress") and cluster.isolated(anyone, "Egress"), namespace
        assert not cluster.allows(anyone, WEB, 80), namespace


@pytest.mark.parametrize(("name", "sets"), CASES)
def test_the_pipeline_reaches_what_it_needs(builds, name: str, sets: list[str]) -> None:
    cfg = load_config(REPO_ROOT / "configs" / f"{name}.yaml", sets)
    cluster, own = install(builds), installed_pods(builds)
    pods = run_pods(cfg)
    s3, mlflow = own["seaweedfs"], own["mlflow"]
    ranks = [p for n, p in pods.items() if n.startswith("train/")]
    steps = [p for n, p in pods.items() if not n.startswith("train/") and n != "predictor"]
    assert ranks and len(steps) >= 12
    for step in steps:  # steps, resource templates, the artifact GC pod
        assert cluster.allows(step, s3, 8333), step.name
        assert cluster.allows(step, mlflow, 5000), step.name
        assert cluster.allows(step, API_SERVER, 6443) and cluster.allows(step, API_SERVER, 443)
        assert cluster.allows(step, DNS, 53, "UDP")
    assert cluster.allows(pods["stage"], WEB, 443)  # data.source: cifar10 over HTTPS
    predictor = pods["predictor"]
    assert cluster.allows(pods["serve-check"], predictor, cfg.serving.port)
    assert cluster.allows(Pod("intruder", "client"), predictor, cfg.serving.port)  # the cluster
    assert cluster.allows(predictor, s3, 8333) and cluster.allows(predictor, mlflow, 5000)
    for rank in ranks:
        if rank.host_network:
            continue  # test_host_network_ranks_need_their_nodes_admitted
        assert cluster.allows(rank, DNS, 53, "UDP")
        assert cluster.allows(rank, s3, 8333) and cluster.allows(rank, mlflow, 5000)
        for peer in ranks:
            for port in (*RENDEZVOUS.values(), NCCL_PORT):
                assert cluster.allows(rank, peer, port), (rank.name, peer.name, port)


def test_the_install_reaches_what_it_needs(builds) -> None:
    cluster, own = install(builds), installed_pods(builds)
    assert cluster.allows(own["mlflow"], own["seaweedfs"], 8333)  # its artifact store
    assert cluster.allows(own["argo-server"], own["seaweedfs"], 8333)  # reports in the UI
    # the buckets job makes the buckets over S3 (create-buckets.py); SeaweedFS's master,
    # volume server and filer share one pod and its loopback, which no policy governs: no
    # pod reaches their ports, the buckets job and SeaweedFS's own pod included
    assert cluster.allows(own["seaweedfs-buckets"], own["seaweedfs"], 8333)
    for port in INTERNAL_PORTS:
        assert not cluster.allows(own["seaweedfs-buckets"], own["seaweedfs"], port), port
        assert not cluster.allows(own["seaweedfs"], own["seaweedfs"], port), port
    webhooks = {
        "training-operator": 9443,
        "kubeflow-trainer-controller-manager": 9443,
        "jobset-controller-manager": 9443,
        "kserve-controller-manager": 9443,
        "volcano-admission": 8443,
        "cert-manager-webhook": 10250,
    }
    for name, port in webhooks.items():
        assert cluster.allows(API_SERVER, own[name], port), name
    for name, pod in own.items():
        assert cluster.allows(pod, DNS, 53, "UDP"), name
        if pod.namespace not in ("seaweedfs", "mlflow"):  # controllers and their jobs
            assert cluster.allows(pod, API_SERVER, 6443), name
    assert not cluster.allows(own["mlflow"], API_SERVER, 6443)  # no API calls: no route


@pytest.mark.parametrize(("name", "sets"), CASES)
def test_no_pod_of_another_namespace_reaches_the_data_or_the_ranks(
    builds, name: str, sets: list[str]
) -> None:
    """Even where ipBlocks also match pod addresses, and with the pipeline's own labels."""
    cfg = load_config(REPO_ROOT / "configs" / f"{name}.yaml", sets)
    cluster, own = install(builds, ipblocks_match_pods=True), installed_pods(builds)
    pods = run_pods(cfg)
    ranks = [p for n, p in pods.items() if n.startswith("train/")]
    for labels in ({}, pods["stage"].labels, ranks[0].labels, pods["predictor"].labels):
        for namespace in ("intruder", "default", "kubeflow", "kserve"):
            intruder = Pod(namespace, "intruder", labels, ip="10.244.7.7")
            for port in SEAWEEDFS_PORTS:
                assert not cluster.allows(intruder, own["seaweedfs"], port), (namespace, port)
            assert not cluster.allows(intruder, own["mlflow"], 5000), namespace
            assert not cluster.allows(intruder, own["argo-server"], 2746), namespace
            for rank in ranks:
                if rank.host_network:
                    continue  # the node's network: no NetworkPolicy covers it
                for port in (*RENDEZVOUS.values(), NCCL_PORT):
                    assert not cluster.allows(intruder, rank, port), (namespace, rank.name)
    for step in (pods["stage"], pods["serve-check"], pods["train"], pods["predictor"]):
        for port in INTERNAL_PORTS:  # S3 alone, even for the pipeline's own pods
            assert not cluster.allows(step, own["seaweedfs"], port), (step.name, port)
        for rank in ranks:  # no step of the workflow reaches the ranks either
            if not rank.host_network:
                assert not cluster.allows(step, rank, RENDEZVOUS["PyTorchJob"]), step.name


def test_host_network_ranks_need_their_nodes_admitted(builds) -> None:
    """With cluster.host_network the ranks are their nodes to every policy: S3 and MLflow
    refuse them until the nodes' addresses are admitted, as docs/cluster.md says to."""
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml", ["cluster.host_network=true"])
    own = installed_pods(builds)
    ranks = [p for n, p in run_pods(cfg).items() if n.startswith("train/")]
    assert ranks and all(r.host_network for r in ranks)
    assert not install(builds).allows(ranks[0], own["seaweedfs"], 8333)
    cluster = install(builds)
    admitted = []
    for policy in cluster.policies:
        if policy["metadata"]["name"] in ("s3-clients", "tracking-clients"):
            policy = copy.deepcopy(policy)
            policy["spec"]["ingress"][0]["from"].append({"ipBlock": {"cidr": "172.18.0.0/16"}})
        admitted.append(policy)
    cluster.policies = admitted
    assert cluster.allows(ranks[0], own["seaweedfs"], 8333)
    assert cluster.allows(ranks[0], own["mlflow"], 5000)


def test_every_configs_serving_port_is_the_policies(builds) -> None:
    """The predictor's, its clients' and serve-check's policies name port 8080: serving.port
    of every config (a config that changes it changes pipeline/networkpolicies.yaml and
    predictor-clients.yaml too)."""
    for path in sorted((REPO_ROOT / "configs").glob("*.yaml")):
        assert load_config(path).serving.port == 8080, path.name
    docs = [d for docs in builds.values() for d in docs if d["kind"] == "NetworkPolicy"]
    for name in ("predictor", "predictor-clients"):
        (policy,) = [d for d in docs if d["metadata"]["name"] == name]
        assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8080}]
    (check,) = [d for d in docs if d["metadata"]["name"] == "serve-check-to-predictor"]
    assert check["spec"]["egress"][0]["ports"] == [{"protocol": "TCP", "port": 8080}]


# --- the predictor's clients: a setting -----------------------------------------------------

PREDICTOR_CLIENTS = cluster_build.CLUSTER / "pipeline" / "predictor-clients.yaml"


def documented_narrowing() -> list[dict[str, Any]]:
    """The narrowed ``from`` the setting's own comment gives (its indented example)."""
    lines = PREDICTOR_CLIENTS.read_text().split("Narrowed", 1)[1].splitlines()
    example = itertools.takewhile(
        lambda line: line.startswith("#   "),
        itertools.dropwhile(lambda line: not line.startswith("#   "), lines),
    )
    return yaml.safe_load("\n".join(line[4:] for line in example))["from"]


def pipeline_with_setting(edit: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """configs/cluster/pipeline built by kustomize, as a user applies it after editing
    predictor-clients.yaml (``edit`` changes the NetworkPolicy's spec)."""
    setting = yaml.safe_load(PREDICTOR_CLIENTS.read_text())
    edit(setting["spec"])
    with tempfile.TemporaryDirectory() as tmp:
        layer = Path(tmp) / "pipeline"
        shutil.copytree(PREDICTOR_CLIENTS.parent, layer)
        (layer / PREDICTOR_CLIENTS.name).write_text(yaml.safe_dump(setting))
        done = subprocess.run(
            [cluster_build.kubectl(), "kustomize", str(layer)],
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def narrowed(spec: dict[str, Any]) -> None:
    spec["ingress"][0]["from"] = documented_narrowing()


SETTINGS = {  # name: (edit, who may call the predictor besides serve-check)
    # the cluster: every pod of every namespace (an address outside the pods is not one)
    "default": (lambda spec: None, {"intruder", "my-app", "ingress-nginx"}),
    "narrowed": (narrowed, {"my-app", "ingress-nginx", "load-balancer"}),
    "serve-check alone": (lambda spec: spec.update(ingress=[]), set()),
    # the trap the setting's comment warns of: an empty from admits every source
    "empty from": (
        lambda spec: spec["ingress"][0].update({"from": []}),
        {"intruder", "my-app", "ingress-nginx", "load-balancer"},
    ),
}
CLIENTS = {
    "intruder": Pod("intruder", "client", {"app": "client"}, ip="10.244.7.7"),
    "my-app": Pod("my-app", "client", {"app": "client"}, ip="10.244.8.8"),
    "ingress-nginx": Pod("ingress-nginx", "controller", {"app": "nginx"}, ip="10.244.9.1"),
    "load-balancer": "192.0.2.10",
}


@pytest.mark.parametrize("setting", SETTINGS)
def test_the_predictors_clients_are_the_settings(builds, setting: str) -> None:
    """predictor-clients.yaml as committed admits every namespace on serving.port; its
    documented narrowing refuses a pod of another namespace there and admits the named
    ones; serve-check reaches the predictor under every setting, and no setting opens
    another port. Pod addresses inside ipBlocks or not: the answers hold either way."""
    edit, admitted = SETTINGS[setting]
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml")
    pods = run_pods(cfg)
    predictor, port = pods["predictor"], cfg.serving.port
    for ipblocks_match_pods in (False, True):
        cluster = install(
            builds, ipblocks_match_pods=ipblocks_match_pods, pipeline=pipeline_with_setting(edit)
        )
        assert {n for n, c in CLIENTS.items() if cluster.allows(c, predictor, port)} == admitted
        assert cluster.allows(pods["serve-check"], predictor, port)
        for client in CLIENTS.values():
            assert not cluster.allows(client, predictor, 8081)
        if setting == "default":  # the setting as committed: the built install's answers
            built = install(builds, ipblocks_match_pods=ipblocks_match_pods)
            assert {n for n, c in CLIENTS.items() if built.allows(c, predictor, port)} == admitted
