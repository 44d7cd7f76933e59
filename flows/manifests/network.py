"""The training pods' network, shared by the PyTorchJob and the TrainJob: NCCL's
environment, RDMA (InfiniBand / RoCE) and host networking.

With ``cluster.rdma`` each training pod requests ``cluster.rdma_devices`` of the RDMA
device plugin's resource ``cluster.rdma_resource`` (``rdma/hca``; the NVIDIA network
operator's shared device plugin names it ``rdma/rdma_shared_device_a``), which brings the
HCA's devices (/dev/infiniband) into the container, and NCCL is told to use them:
``NCCL_IB_DISABLE=0``, under ``cluster.nccl_env`` (where NCCL_IB_HCA, NCCL_IB_GID_INDEX for
RoCE, or ``NCCL_NET: IB`` to fail rather than fall back to sockets, belong).

RDMA registers its buffers, which the kernel pins against RLIMIT_MEMLOCK. Kubernetes has no
field for that limit: a container inherits its runtime's (containerd under systemd: 8 MiB),
too little for NCCL. CAP_IPC_LOCK lifts it, but a capability added to a container that runs
as a non-root uid lands in its bounding set only, never in its effective set
(kubernetes/kubernetes#56374; NVIDIA/nvidia-container-toolkit#2037 measured it: uid 1000 with
IPC_LOCK has CapEff 0 and fails to lock 64 MiB, uid 0 with IPC_LOCK locks 1 GiB). Hence
``cluster.rdma_memlock``:

- ``root``: the training container alone runs as uid 0 with every capability dropped but
  IPC_LOCK (no privilege escalation, the pod's fsGroup kept). The trade-off: the training
  process is root inside its container, which PodSecurity's "baseline" and "restricted"
  levels refuse (IPC_LOCK is not among baseline's capabilities): its namespace needs
  "privileged".
- ``node``: the container stays non-root with no capability; only where the nodes'
  container runtime gives containers unlimited memlock (containerd: ``LimitMEMLOCK=infinity``
  in its systemd unit; CRI-O: ``default_ulimits = ["memlock=-1:-1"]``).

``cluster.host_network`` puts the training pods on their node's network (the HCA's own IP
interfaces, no CNI in the path) with ``dnsPolicy: ClusterFirstWithHostNet``: a hostNetwork
pod otherwise resolves with its node's resolver and cannot find the job's Services, where
the master's address lives. NCCL_SOCKET_IFNAME must then name the node's interface.
"""

from __future__ import annotations

from typing import Any

from flows.manifests.shared_pod import EnvSpec, container_security
from steps.common.config import PipelineConfig

IB_ENV = {"NCCL_IB_DISABLE": "0"}  # NCCL uses the InfiniBand verbs transport
IPC_LOCK = "IPC_LOCK"
HOST_NETWORK_DNS = "ClusterFirstWithHostNet"


def nccl_env(cfg: PipelineConfig) -> list[EnvSpec]:
    """NCCL's variables of the training container: RDMA's, then the config's, by name."""
    c = cfg.cluster
    merged = {**(IB_ENV if c.rdma else {}), **c.nccl_env}
    return [EnvSpec(name, value) for name, value in sorted(merged.items())]


def rdma_resources(cfg: PipelineConfig) -> dict[str, str]:
    """The RDMA device plugin's resource, request and limit alike (an extended resource)."""
    c = cfg.cluster
    return {c.rdma_resource: str(c.rdma_devices)} if c.rdma else {}


def locks_memory_as_root(cfg: PipelineConfig) -> bool:
    return cfg.cluster.rdma and cfg.cluster.rdma_memlock == "root"


def training_security(cfg: PipelineConfig) -> dict[str, Any]:
    """The training container's securityContext: every pod's, or with RDMA locking memory
    as root, uid 0 with IPC_LOCK alone (the pod's non-root settings stay for the rest)."""
    spec = container_security(cfg)
    if locks_memory_as_root(cfg):
        spec = {
            **spec,
            "runAsNonRoot": False,
            "runAsUser": 0,
            "capabilities": {"drop": ["ALL"], "add": [IPC_LOCK]},
        }
    return spec


def pod_network(cfg: PipelineConfig) -> dict[str, Any]:
    """The pod spec's network fields (Kubernetes JSON): none, or the node's network."""
    if not cfg.cluster.host_network:
        return {}
    return {"hostNetwork": True, "dnsPolicy": HOST_NETWORK_DNS}
