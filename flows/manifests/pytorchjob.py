"""The training step's PyTorchJob, built from the config on the kubeflow-training SDK models.

Container -> pod template -> replica specs -> job, as the SDK's own builders do, with the
operator's constants for kinds, replica types and the container name; serialised by the
Kubernetes client, so the manifest carries exactly the CRD's field names.

What the operator's admission webhook checks and the CRD schema does not, built right here:
exactly one Master replica (plus ``nodes - 1`` Workers), a container named ``pytorch``, and a
DNS-1035 job name whose replica names ``<job>-worker-<i>`` (pods and Services) still fit in
63 characters once the API server has appended its 5 random characters to generateName.

The launch is ``torchrun -m steps.train ...`` with no launcher flags: the operator sets
``PET_NNODES``, ``PET_NPROC_PER_NODE`` (from ``spec.nprocPerNode``), ``PET_NODE_RANK`` and
the master address for each pod, and torchrun reads them; the local runner sets the same.
"""

from __future__ import annotations

from typing import Any

import yaml
from kubeflow.training import models as kf
from kubeflow.training.constants import constants
from kubernetes import client as k8s

from flows.manifests import network
from flows.manifests.names import MAX_NAME, dns1035
from flows.manifests.shared_pod import (
    DATA_VOLUME,
    ISTIO_INJECT,
    EnvSpec,
    fill_sentinels,
    pod_security,
    sentinel,
    toleration,
)
from steps.common.config import PipelineConfig

GENERATED_SUFFIX = 5  # characters the API server appends to metadata.generateName
SHM_VOLUME = "dshm"
GPU = "nvidia.com/gpu"
SUCCESS = "status.replicaStatuses.Master.succeeded > 0"  # the step ends with the Master
# The job's Failed condition, wherever it lands in status.conditions. Under OnFailure a
# failing pod restarts in place and never reaches phase Failed, so replicaStatuses never
# count a failure: the operator marks the job Failed past its backoff limit or deadline
# (Training Operator v1.9.4 pkg/controller.v1/common/job.go ReconcileJobs). It appends the
# condition after Created and at most one of Running/Restarting (and Suspended, if ever
# suspended): pkg/util/status.go setCondition/filterOutCondition. Argo fails the step when
# ANY failure requirement holds (v4.0.5 workflow/executor/resource.go matchConditions), so
# the comma here is an "or".
FAILED_AT = range(4)
FAILURE = ", ".join(f"status.conditions.{i}.type == Failed" for i in FAILED_AT)
RESTART_POLICY = "OnFailure"  # a restarted pod resumes from the newest checkpoint


def replica_counts(cfg: PipelineConfig) -> dict[str, int]:
    """Master 1 + Worker ``nodes - 1`` (no Worker entry on one node)."""
    counts = {constants.REPLICA_TYPE_MASTER: 1}
    if cfg.cluster.nodes > 1:
        counts[constants.REPLICA_TYPE_WORKER] = cfg.cluster.nodes - 1
    return counts


def replica_suffix_len(counts: dict[str, int]) -> int:
    """Length of the longest ``-<type>-<index>`` the operator appends to the job name."""
    return max(len(f"-{kind.lower()}-{count - 1}") for kind, count in counts.items())


def generate_name(prefix: str, counts: dict[str, int]) -> str:
    """metadata.generateName such that every replica's pod and Service name is a DNS-1035
    label of at most 63 characters, however long the prefix or large the job."""
    budget = MAX_NAME - replica_suffix_len(counts) - GENERATED_SUFFIX - 1  # 1: the "-"
    return f"{dns1035(prefix, budget)}-"


def _quantities(cfg: PipelineConfig) -> k8s.V1ResourceRequirements:
    c = cfg.cluster
    requests: dict[str, Any] = {"cpu": c.cpu, "memory": c.memory}
    limits: dict[str, Any] = {"memory": c.memory}
    if c.gpus_per_node:
        requests[GPU] = limits[GPU] = str(c.gpus_per_node)
    requests |= network.rdma_resources(cfg)
    limits |= network.rdma_resources(cfg)
    return k8s.V1ResourceRequirements(requests=requests, limits=limits)


def _security(cfg: PipelineConfig) -> k8s.V1SecurityContext:
    spec = network.training_security(cfg)
    return k8s.V1SecurityContext(
        allow_privilege_escalation=spec["allowPrivilegeEscalation"],
        run_as_non_root=spec["runAsNonRoot"],
        run_as_user=spec.get("runAsUser"),
        capabilities=k8s.V1Capabilities(**spec["capabilities"]),
        seccomp_profile=k8s.V1SeccompProfile(type=spec["seccompProfile"]["type"]),
    )


def _pod_security(cfg: PipelineConfig) -> k8s.V1PodSecurityContext:
    spec = pod_security(cfg)
    return k8s.V1PodSecurityContext(
        run_as_non_root=spec["runAsNonRoot"],
        run_as_user=spec["runAsUser"],
        run_as_group=spec["runAsGroup"],
        fs_group=spec["fsGroup"],
        seccomp_profile=k8s.V1SeccompProfile(type=spec["seccompProfile"]["type"]),
    )


def build_container(
    cfg: PipelineConfig, *, image: str, args: list[str], env: list[EnvSpec]
) -> k8s.V1Container:
    """The ``pytorch`` container: torchrun, resources, /dev/shm, NCCL environment (and
    RDMA's: flows/manifests/network.py)."""
    nccl = network.nccl_env(cfg)
    mounts = [k8s.V1VolumeMount(name=SHM_VOLUME, mount_path="/dev/shm")]
    if cfg.cluster.pvc:
        mounts.append(k8s.V1VolumeMount(name=DATA_VOLUME, mount_path=cfg.cluster.pvc_mount_path))
    return k8s.V1Container(
        name=constants.PYTORCHJOB_CONTAINER,
        image=image,
        image_pull_policy=cfg.images.pull_policy,
        command=[constants.ENTRYPOINT_TORCH],
        args=args,
        env=[item.k8s() for item in [*env, *nccl]],
        resources=_quantities(cfg),
        volume_mounts=mounts,
        security_context=_security(cfg),
    )


def build_pod_template(
    cfg: PipelineConfig, container: k8s.V1Container, labels: dict[str, str]
) -> k8s.V1PodTemplateSpec:
    """One replica's pod: node placement, gang scheduler, shared memory, no root, no
    service-account token (training talks to S3 and MLflow, never to the API server)."""
    c = cfg.cluster
    volumes = [
        k8s.V1Volume(
            name=SHM_VOLUME,
            empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=c.shm_size),
        )
    ]
    if c.pvc:
        claim = k8s.V1PersistentVolumeClaimVolumeSource(claim_name=c.pvc)
        volumes.append(k8s.V1Volume(name=DATA_VOLUME, persistent_volume_claim=claim))
    annotations = {} if c.istio_inject else {ISTIO_INJECT: "false"}
    host = network.pod_network(cfg)
    return k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(labels=dict(labels), annotations=annotations or None),
        spec=k8s.V1PodSpec(
            containers=[container],
            volumes=volumes,
            host_network=host.get("hostNetwork"),
            dns_policy=host.get("dnsPolicy"),
            node_selector=dict(c.node_selector) or None,
            tolerations=[toleration(t) for t in c.tolerations] or None,
            scheduler_name=c.scheduler_name,
            priority_class_name=c.priority_class,
            security_context=_pod_security(cfg),
            automount_service_account_token=False,
        ),
    )


def build_run_policy(cfg: PipelineConfig) -> kf.KubeflowOrgV1RunPolicy:
    """Clean-up, restarts, deadline, TTL, and Volcano gang scheduling when configured."""
    c = cfg.cluster
    gang = c.queue or c.priority_class or c.min_available or c.scheduler_name == "volcano"
    scheduling = (
        kf.KubeflowOrgV1SchedulingPolicy(
            queue=c.queue,
            priority_class=c.priority_class,
            min_available=c.min_available or c.nodes,
        )
        if gang
        else None
    )
    return kf.KubeflowOrgV1RunPolicy(
        clean_pod_policy=c.clean_pod_policy,
        backoff_limit=c.backoff_limit,
        active_deadline_seconds=c.active_deadline_seconds,
        ttl_seconds_after_finished=c.ttl_seconds_after_finished,
        scheduling_policy=scheduling,
    )


def build_elastic_policy(cfg: PipelineConfig) -> kf.KubeflowOrgV1ElasticPolicy | None:
    """Elastic between ``elastic_min_nodes`` and ``nodes`` (c10d rendezvous); processes per
    node stay in ``spec.nprocPerNode`` (``elasticPolicy.nProcPerNode`` is deprecated)."""
    c = cfg.cluster
    if c.elastic_min_nodes is None:
        return None
    return kf.KubeflowOrgV1ElasticPolicy(
        min_replicas=c.elastic_min_nodes,
        max_replicas=c.nodes,
        rdzv_backend="c10d",
        max_restarts=c.backoff_limit,
    )


def _owner(owner: dict[str, Any] | None) -> list[k8s.V1OwnerReference] | None:
    if owner is None:
        return None
    return [
        k8s.V1OwnerReference(
            api_version=owner["apiVersion"],
            kind=owner["kind"],
            name=owner["name"],
            uid=owner["uid"],
            controller=owner["controller"],
            block_owner_deletion=owner["blockOwnerDeletion"],
        )
    ]


def build_pytorchjob(
    cfg: PipelineConfig,
    *,
    args: list[str],
    env: list[EnvSpec],
    labels: dict[str, str],
    owner: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> kf.KubeflowOrgV1PyTorchJob:
    """``owner``: the job's ownerReference (its workflow), as Kubernetes JSON;
    ``annotations``: the job's own (not its pods')."""
    counts = replica_counts(cfg)
    container = build_container(cfg, image=cfg.images.image("train"), args=args, env=env)
    template = build_pod_template(cfg, container, labels)
    replicas = {
        kind: kf.KubeflowOrgV1ReplicaSpec(
            replicas=count, restart_policy=RESTART_POLICY, template=template
        )
        for kind, count in counts.items()
    }
    return kf.KubeflowOrgV1PyTorchJob(
        api_version=constants.API_VERSION,
        kind=constants.PYTORCHJOB_KIND,
        metadata=k8s.V1ObjectMeta(
            generate_name=generate_name(cfg.cluster.job_name_prefix, counts),
            labels=dict(labels),
            annotations=dict(annotations) if annotations else None,
            owner_references=_owner(owner),
        ),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            pytorch_replica_specs=replicas,
            nproc_per_node=str(cfg.processes_per_node()),
            run_policy=build_run_policy(cfg),
            elastic_policy=build_elastic_policy(cfg),
        ),
    )


def to_manifest(job: kf.KubeflowOrgV1PyTorchJob) -> dict[str, Any]:
    """The job as the plain data the API server takes (camelCase, no nulls)."""
    return k8s.ApiClient().sanitize_for_serialization(job)


PLANNED_NODES = 1000  # generateName leaves room for "-worker-998"


def parameterized_manifest(
    cfg: PipelineConfig,
    *,
    args: list[str],
    env: list[EnvSpec],
    labels: dict[str, str],
    refs: dict[str, str],
    multinode: bool,
    owner: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    """The job as YAML text whose size follows Argo parameters: ``refs`` maps ``nodes``,
    ``workers`` (an integer expression: nodes - 1), ``gpus-per-node`` and ``nproc-per-node``
    to the ``{{...}}`` Argo substitutes; GPU requests are always set (``"0"`` asks for none).

    The webhook refuses a Worker replica of 0 (``must be at least 1``), so one node and
    several are two manifests: ``multinode`` has the Worker replica (and any elasticPolicy,
    which needs Workers), the other the Master alone."""
    c = cfg.cluster
    cfg.processes_per_node()  # refuses more processes than GPUs in the config itself
    size: dict[str, Any] = {"nodes": PLANNED_NODES, "gpus_per_node": 0}
    if not multinode:
        size.update(nodes=1, elastic_min_nodes=None)
    planned = cfg.model_copy(update={"cluster": c.model_copy(update=size)})
    built = build_pytorchjob(
        planned, args=args, env=env, labels=labels, owner=owner, annotations=annotations
    )
    job = to_manifest(built)
    spec = job["spec"]
    if multinode:
        specs = spec["pytorchReplicaSpecs"]
        specs[constants.REPLICA_TYPE_WORKER]["replicas"] = sentinel("workers")
    for replica in spec["pytorchReplicaSpecs"].values():
        resources = replica["template"]["spec"]["containers"][0]["resources"]
        resources["requests"][GPU] = resources["limits"][GPU] = refs["gpus-per-node"]
    spec["nprocPerNode"] = refs["nproc-per-node"]
    scheduling = spec["runPolicy"].get("schedulingPolicy")
    if scheduling and c.min_available is None:  # the gang is every pod
        scheduling["minAvailable"] = sentinel("nodes")
    if "elasticPolicy" in spec:
        spec["elasticPolicy"]["maxReplicas"] = sentinel("nodes")
    text = yaml.safe_dump(job, sort_keys=False)
    return fill_sentinels(text, refs)
