"""What the training-job tests share: the PyTorchJob admission webhook's checks
(training-operator v1.9) with the replicas' names, what a pod must hold under the config's
network options, and the template's job made comparable with the one the config describes."""

from __future__ import annotations

import copy
import re
from typing import Any

from steps.common.config import load_config
from tests.helpers.paths import REPO_ROOT

# --- the PyTorchJob webhook (training-operator v1.9) ----------------------------------------

DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
GENERATED = "x7k2p"  # what the API server appends to generateName


def replica_names(manifest: dict[str, Any]) -> list[str]:
    """The pod and Service names the operator derives: <job>-<type>-<index>."""
    name = manifest["metadata"]["generateName"] + GENERATED
    return [name] + [
        f"{name}-{kind.lower()}-{i}"
        for kind, spec in manifest["spec"]["pytorchReplicaSpecs"].items()
        for i in range(spec["replicas"])
    ]


def webhook_problems(manifest: dict[str, Any]) -> list[str]:
    """The checks of training-operator v1.9's PyTorchJob admission webhook, plus the names
    of the replicas' pods and Services."""
    problems = []
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    problems += [f"replica type {k}" for k in specs if k not in ("Master", "Worker")]
    if specs.get("Master", {}).get("replicas") != 1:
        problems.append("Master replicas must be 1")
    if "Worker" in specs and specs["Worker"]["replicas"] < 1:
        problems.append("Worker replicas must be at least 1")
    if "elasticPolicy" in manifest["spec"]:
        if "Worker" not in specs:
            problems.append("elasticPolicy needs Workers")
        if (
            "nProcPerNode" in manifest["spec"]["elasticPolicy"]
            and "nprocPerNode" in manifest["spec"]
        ):
            problems.append("elasticPolicy.nProcPerNode with spec.nprocPerNode")
    for kind, spec in specs.items():
        containers = spec["template"]["spec"]["containers"]
        if not any(c["name"] == "pytorch" for c in containers):
            problems.append(f"{kind}: no container named pytorch")
        problems += [f"{kind}: container without image" for c in containers if not c.get("image")]
    for name in replica_names(manifest):
        if len(name) > 63 or not DNS1035.fullmatch(name):
            problems.append(f"name {name!r} is not a DNS-1035 label of at most 63 characters")
    return problems


# --- RDMA and host networking (flows/manifests/network.py) ----------------------------------

CLUSTER_YAML = REPO_ROOT / "configs" / "cluster.yaml"
NETWORK_CASES = {  # name -> overrides of configs/cluster.yaml
    "off": [],
    "rdma": ["cluster.rdma=true"],
    "rdma-shared-device": [
        "cluster.rdma=true",
        "cluster.rdma_resource=rdma/rdma_shared_device_a",  # NVIDIA network operator
        "cluster.rdma_devices=2",
    ],
    "rdma-node-memlock": ["cluster.rdma=true", "cluster.rdma_memlock=node"],
    "host-network": ["cluster.host_network=true"],
    "rdma-host-network": ["cluster.rdma=true", "cluster.host_network=true"],
}
BASE_RESOURCES = {"cpu", "memory", "nvidia.com/gpu"}


def network_problems(cfg: Any, container: dict[str, Any], pod_spec: dict[str, Any]) -> list[str]:
    """What a training pod must hold under the config's network settings: the RDMA
    resource (request = limit, an extended resource), NCCL over InfiniBand, memory locking
    that takes effect (IPC_LOCK only for uid 0: kubernetes#56374), the node's network with
    the DNS policy that still resolves Services; none of it when the options are off."""
    c, problems = cfg.cluster, []
    wanted = {c.rdma_resource: str(c.rdma_devices)} if c.rdma else {}
    for part in ("requests", "limits"):
        extra = {
            k: str(v) for k, v in container["resources"][part].items() if k not in BASE_RESOURCES
        }
        if extra != wanted:
            problems.append(f"resources.{part}: {extra} != {wanted}")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    if env.get("NCCL_IB_DISABLE") != ("0" if c.rdma else c.nccl_env.get("NCCL_IB_DISABLE")):
        problems.append(f"NCCL_IB_DISABLE={env.get('NCCL_IB_DISABLE')}")
    problems += [f"{k} missing" for k, v in c.nccl_env.items() if env.get(k) != v]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert pod_spec["securityContext"]["runAsUser"] == c.run_as_user  # the pod's other parts
    if c.rdma and c.rdma_memlock == "root":
        held = (security.get("runAsUser"), security["runAsNonRoot"], security["capabilities"])
        if held != (0, False, {"drop": ["ALL"], "add": ["IPC_LOCK"]}):
            problems.append(f"memlock as root: {held}")
    elif security["runAsNonRoot"] is not True or security["capabilities"] != {"drop": ["ALL"]}:
        problems.append(f"not non-root without capabilities: {security}")
    network = (pod_spec.get("hostNetwork"), pod_spec.get("dnsPolicy"))
    if network != ((True, "ClusterFirstWithHostNet") if c.host_network else (None, None)):
        problems.append(f"hostNetwork, dnsPolicy: {network}")
    return problems


# --- the template against the config ----------------------------------------------------

GPU = "nvidia.com/gpu"


NPROC: dict[str, int] = {}  # the template resolves nproc_per_node=auto (set per test)


def config_of(args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """A step's own arguments, and the config its ``--set`` arguments rebuild; ``auto``
    processes per node as the template resolves them."""
    own, overrides, rest = [], [], iter(args)
    for arg in rest:
        if arg == "--set":
            overrides.append(next(rest))
        else:
            own.append(arg)
    config = load_config(None, overrides).model_dump(mode="json")
    if config["train"]["nproc_per_node"] == "auto":
        config["train"]["nproc_per_node"] = NPROC["auto"]
    return own, config


def comparable_job(job: dict[str, Any]) -> dict[str, Any]:
    """What may differ between the template's job and the one the config describes
    removed: the name's room for larger jobs, a request for zero GPUs, and the order of
    the ``--set`` arguments (each container's arguments as the config they rebuild)."""
    job = copy.deepcopy(job)
    job["metadata"].pop("generateName")

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if node.get(GPU) == "0":
                del node[GPU]
            if "command" in node and "args" in node:  # a container, a TrainJob's trainer
                node["args"] = config_of(node["args"])
            for value in node.values():
                walk(value)

    walk(job["spec"])
    return job
