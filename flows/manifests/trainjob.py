"""Kubeflow Trainer v2 (v2.3.0): the TrainJob the training step creates and the
ClusterTrainingRuntime it runs on, built on the ``kubeflow-trainer-api`` models.

The runtime is Trainer's ``torch-distributed`` (manifests/base/runtimes/torch_distributed.yaml)
made fit for this pipeline: one replicated job ``node`` whose container ``node`` the torch
plugin fills with ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` and the master
address, as the Training Operator does for a PyTorchJob; plus what every pod of ours has:
the data volume, a memory-backed /dev/shm, no root, no service-account token, the node
placement, and gang scheduling (Volcano or coscheduling) from the config. The TrainJob
says what changes per run: image, ``torchrun -m steps.train ...``, environment, nodes,
processes and resources per node, and (a runtime patch) the pods' labels, so ``argo logs``
finds every rank.

Argo sees the end of a TrainJob in its conditions (Trainer's ``Complete`` / ``Failed``).
A resource template's conditions are label selectors over JSON paths, which cannot search a
list by type; a TrainJob that is never suspended gets exactly one condition, the terminal
one, so the first condition is it.
"""

from __future__ import annotations

from typing import Any

import kubeflow_trainer_api.models as tm
import yaml
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
)
from steps.common.config import PipelineConfig

API_VERSION = "trainer.kubeflow.org/v1alpha1"
NODE = "node"  # replicated job and container name the torch plugin configures
ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
PATCH_MANAGER = "cifar-pipeline.io/argo"
COSCHEDULING_SCHEDULER = "scheduler-plugins-scheduler"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"
SHM_VOLUME = "dshm"
GPU = "nvidia.com/gpu"
SUCCESS = "status.conditions.0.type == Complete, status.conditions.0.status == True"
FAILURE = "status.conditions.0.type == Failed"
# room for "-node-<job>-<pod>-xxxxx" after the TrainJob (= JobSet) name
NAME_BUDGET = MAX_NAME - len("-node-0-999-") - 5 - 5


def _k8s(obj: Any) -> Any:
    return k8s.ApiClient().sanitize_for_serialization(obj)


def pod_group_policy(cfg: PipelineConfig) -> tm.TrainerV1alpha1PodGroupPolicy | None:
    """Gang scheduling from ``cluster.scheduler_name``: every node's pod starts, or none."""
    c = cfg.cluster
    if c.scheduler_name == "volcano":
        return tm.TrainerV1alpha1PodGroupPolicy(
            volcano=tm.TrainerV1alpha1VolcanoPodGroupPolicySource()
        )
    if c.scheduler_name == COSCHEDULING_SCHEDULER:
        source = tm.TrainerV1alpha1CoschedulingPodGroupPolicySource(
            schedule_timeout_seconds=c.coscheduling_timeout_s
        )
        return tm.TrainerV1alpha1PodGroupPolicy(coscheduling=source)
    return None


def runtime_pod(cfg: PipelineConfig) -> dict[str, Any]:
    """The node pod of the runtime: volumes, security, placement; no per-run values."""
    c = cfg.cluster
    mounts = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": c.shm_size}}
    ]
    if c.pvc:
        mounts.append({"name": DATA_VOLUME, "mountPath": c.pvc_mount_path})
        volumes.append({"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": c.pvc}})
    container = {
        "name": NODE,
        "image": cfg.images.image("train"),
        "imagePullPolicy": cfg.images.pull_policy,
        "volumeMounts": mounts,
        "securityContext": network.training_security(cfg),
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        **network.pod_network(cfg),
        "restartPolicy": "OnFailure",  # a restarted pod resumes from the newest checkpoint
        "securityContext": pod_security(cfg),
        "automountServiceAccountToken": False,
        "nodeSelector": dict(c.node_selector) or None,
        "tolerations": list(c.tolerations) or None,
        "schedulerName": c.scheduler_name,
        "priorityClassName": c.priority_class,
    }
    annotations = {} if c.istio_inject else {ISTIO_INJECT: "false"}
    metadata = {"labels": dict(ANCESTOR), "annotations": annotations or None}
    return {"metadata": metadata, "spec": {k: v for k, v in spec.items() if v is not None}}


def build_runtime(
    cfg: PipelineConfig, labels: dict[str, str]
) -> tm.TrainerV1alpha1ClusterTrainingRuntime:
    c = cfg.cluster
    job = {"template": runtime_pod(cfg)}
    replicated = tm.JobsetV1alpha2ReplicatedJob.from_dict(
        {"name": NODE, "replicas": 1, "template": {"metadata": {"labels": ANCESTOR}, "spec": job}}
    )
    jobset = tm.JobsetV1alpha2JobSetSpec(
        replicated_jobs=[replicated],
        failure_policy=tm.JobsetV1alpha2FailurePolicy(max_restarts=c.backoff_limit),
    )
    return tm.TrainerV1alpha1ClusterTrainingRuntime(
        api_version=API_VERSION,
        kind="ClusterTrainingRuntime",
        metadata=tm.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
            name=c.trainer_runtime,
            labels={**labels, "trainer.kubeflow.org/framework": "torch"},
        ),
        spec=tm.TrainerV1alpha1TrainingRuntimeSpec(
            ml_policy=tm.TrainerV1alpha1MLPolicy(
                num_nodes=1, torch=tm.TrainerV1alpha1TorchMLPolicySource()
            ),
            pod_group_policy=pod_group_policy(cfg),
            template=tm.TrainerV1alpha1JobSetTemplateSpec(spec=jobset),
        ),
    )


def _resources(cfg: PipelineConfig, gpus: str) -> dict[str, Any]:
    c = cfg.cluster
    requests: dict[str, Any] = {"cpu": c.cpu, "memory": c.memory}
    limits: dict[str, Any] = {"memory": c.memory}
    if gpus != "0":
        requests[GPU] = limits[GPU] = gpus
    requests |= network.rdma_resources(cfg)
    limits |= network.rdma_resources(cfg)
    return {"requests": requests, "limits": limits}


def runtime_patch(cfg: PipelineConfig, labels: dict[str, str]) -> tm.TrainerV1alpha1RuntimePatch:
    """What the TrainJob lays over the runtime, whatever the runtime holds: the pods'
    labels (``argo logs`` finds every rank), the config's node placement (a GPU config's
    pods land on its GPU nodes even on a CPU runtime), and the Volcano queue.

    Trainer v2.3.0 reads the queue only from the runtime's JobSet template annotations or a
    patch's ``trainingRuntimeSpec.template.metadata.annotations``, never from the TrainJob's
    own metadata (pkg/runtime/core/trainingruntime.go newRuntimeInfo; plugins/volcano
    Build). A PodSpecPatch takes nodeSelector and tolerations but no priorityClassName or
    schedulerName (pkg/apis/trainer/v1alpha1/trainjob_types.go PodSpecPatch): those stay
    the runtime's, as do hostNetwork and dnsPolicy (cluster.host_network). Its ContainerPatch
    takes a securityContext, merged into the runtime's by strategic merge
    (pkg/runtime/core/trainingruntime.go mergeRuntimePatches): with RDMA locking memory as
    root, the node container is uid 0 with IPC_LOCK whatever the runtime says."""
    c = cfg.cluster
    pod: dict[str, Any] = {"metadata": {"labels": dict(labels)}}
    placement: dict[str, Any] = {
        "nodeSelector": dict(c.node_selector),
        "tolerations": list(c.tolerations),
    }
    if network.locks_memory_as_root(cfg):  # RDMA's memlock, whatever the runtime's container
        placement["containers"] = [
            {"name": NODE, "securityContext": network.training_security(cfg)}
        ]
    if any(placement.values()):
        pod["spec"] = {k: v for k, v in placement.items() if v}
    replicated = {"name": NODE, "template": {"spec": {"template": pod}}}
    template: dict[str, Any] = {"spec": {"replicatedJobs": [replicated]}}
    if c.queue and c.scheduler_name == "volcano":
        template["metadata"] = {"annotations": {VOLCANO_QUEUE: c.queue}}
    return tm.TrainerV1alpha1RuntimePatch.from_dict(
        {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": template}}
    )


def build_trainjob(
    cfg: PipelineConfig,
    *,
    args: list[str],
    env: list[EnvSpec],
    labels: dict[str, str],
    nodes: int | str | None = None,
    nproc: int | str | None = None,
    gpus: str | None = None,
    owner: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> tm.TrainerV1alpha1TrainJob:
    """The TrainJob; ``nodes``, ``nproc`` and ``gpus`` default to the config's values;
    ``owner``: its ownerReference (the workflow), as Kubernetes JSON; ``annotations``:
    the TrainJob's own."""
    c = cfg.cluster
    nccl = network.nccl_env(cfg)
    trainer = tm.TrainerV1alpha1Trainer.from_dict(
        {
            "image": cfg.images.image("train"),
            "command": ["torchrun"],
            "args": args,
            "env": [_k8s(item.k8s()) for item in [*env, *nccl]],
            "numNodes": c.nodes if nodes is None else nodes,
            "numProcPerNode": cfg.processes_per_node() if nproc is None else nproc,
            "resourcesPerNode": _resources(cfg, str(c.gpus_per_node) if gpus is None else gpus),
        }
    )
    owners = [tm.IoK8sApimachineryPkgApisMetaV1OwnerReference.from_dict(owner)] if owner else None
    return tm.TrainerV1alpha1TrainJob(
        api_version=API_VERSION,
        kind="TrainJob",
        metadata=tm.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
            generate_name=f"{dns1035(c.job_name_prefix, NAME_BUDGET)}-",
            labels=dict(labels),
            annotations=dict(annotations) if annotations else None,
            owner_references=owners,
        ),
        spec=tm.TrainerV1alpha1TrainJobSpec(
            runtime_ref=tm.TrainerV1alpha1RuntimeRef(
                name=c.trainer_runtime,
                api_group="trainer.kubeflow.org",
                kind="ClusterTrainingRuntime",
            ),
            trainer=trainer,
            runtime_patches=[runtime_patch(cfg, labels)],
            active_deadline_seconds=c.active_deadline_seconds,
        ),
    )


def to_manifest(
    obj: tm.TrainerV1alpha1TrainJob | tm.TrainerV1alpha1ClusterTrainingRuntime,
) -> dict[str, Any]:
    """Plain data the API server takes: camelCase, no nulls."""
    return obj.to_dict()


def parameterized_manifest(
    cfg: PipelineConfig,
    *,
    args: list[str],
    env: list[EnvSpec],
    labels: dict[str, str],
    refs: dict[str, str],
    owner: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    """The TrainJob as YAML text whose size follows Argo parameters (``refs``: ``nodes``,
    ``nproc-per-node``, ``gpus-per-node``); GPU requests always set (``"0"`` asks none)."""
    cfg.processes_per_node()  # refuses more processes than GPUs in the config itself
    job = build_trainjob(
        cfg,
        args=args,
        env=env,
        labels=labels,
        nodes=1,
        nproc=1,
        gpus="1",
        owner=owner,
        annotations=annotations,
    )
    data = to_manifest(job)
    trainer = data["spec"]["trainer"]
    trainer["numNodes"], trainer["numProcPerNode"] = sentinel("nodes"), sentinel("nproc-per-node")
    for part in trainer["resourcesPerNode"].values():
        part[GPU] = refs["gpus-per-node"]
    return fill_sentinels(yaml.safe_dump(data, sort_keys=False), refs)
