"""The sections only the flow reads: the cluster a run goes to, its images, its schedule."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from steps.common.config.fields import (
    CronName,
    CronSchedule,
    Duration,
    ImageDigest,
    ImageTag,
    KubeName,
    Quantity,
    Section,
    Timezone,
)
from steps.common.version import package_version

# An extended resource a device plugin advertises: a domain-prefixed name outside
# kubernetes.io (kubernetes pkg/apis/core/helper IsExtendedResourceName), e.g. rdma/hca.
EXTENDED_RESOURCE = re.compile(
    r"(?!(?:[^/]*\.)?kubernetes\.io/)(?!requests\.)"
    r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


def _extended_resource(value: str) -> str:
    if not EXTENDED_RESOURCE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an extended resource name, e.g. rdma/hca, rdma/rdma_shared_device_a"
        )
    return value


ExtendedResource = Annotated[str, AfterValidator(_extended_resource)]


class ClusterConfig(Section):
    argo_host: str | None = Field(None, description="Argo server URL; default: ARGO_HOST")
    argo_ui_url: str | None = Field(None, description="Argo UI base URL; default: argo_host")
    namespace: KubeName = Field("argo", description="namespace of workflows and PyTorchJobs")
    verify_tls: bool = Field(True, description="verify the Argo server's certificate")
    service_account: KubeName = Field("cifar-pipeline", description="workflow service account")
    executor_service_account: KubeName = Field(
        "cifar-pipeline-executor",
        description="account of the Argo executor (init, wait containers) of the container "
        "steps, whose pods mount no token of the workflow's account (it needs a Secret "
        "<name>.service-account-token; configs/cluster/pipeline)",
    )
    nodes: int = Field(1, ge=1, description="PyTorchJob nodes: 1 Master + nodes-1 Workers")
    gpus_per_node: int = Field(0, ge=0, description="nvidia.com/gpu limit per pod")
    cpu: Quantity = Field("2", description="CPU request per training pod")
    memory: Quantity = Field("8Gi", description="memory request per training pod")
    shm_size: Quantity = Field("2Gi", description="size of the /dev/shm memory emptyDir")
    node_selector: dict[str, str] = Field(default_factory=dict, description="pod nodeSelector")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="tolerations")
    nccl_env: dict[str, str] = Field(default_factory=dict, description="NCCL_* variables")
    # RDMA (InfiniBand / RoCE) for NCCL, as flows/manifests/network.py renders it
    rdma: bool = Field(
        False, description="training pods get RDMA: the device plugin's resource, NCCL over IB"
    )
    rdma_resource: ExtendedResource = Field(
        "rdma/hca",
        description="the RDMA device plugin's resource (NVIDIA network operator: "
        "rdma/rdma_shared_device_a)",
    )
    rdma_devices: int = Field(1, ge=1, description="of rdma_resource per training pod")
    rdma_memlock: Literal["root", "node"] = Field(
        "root",
        description="RDMA's locked memory: root (the training container as uid 0 with IPC_LOCK)"
        " or node (non-root; the nodes' container runtime gives unlimited memlock)",
    )
    host_network: bool = Field(
        False,
        description="training pods on their node's network (dnsPolicy ClusterFirstWithHostNet)",
    )
    istio_inject: bool = Field(False, description="allow an Istio sidecar in job pods")
    scheduler_name: str | None = Field(None, description="pod schedulerName, e.g. volcano")
    queue: str | None = Field(None, description="Volcano queue for gang scheduling")
    priority_class: str | None = Field(None, description="gang scheduling priorityClass")
    min_available: int | None = Field(None, ge=1, description="gang size; default: all pods")
    clean_pod_policy: Literal["None", "Running", "All"] = Field(
        "Running", description="pods the operator deletes when the job ends (Running frees GPUs)"
    )
    backoff_limit: int = Field(3, ge=0, description="PyTorchJob restarts before failing")
    active_deadline_seconds: int = Field(6 * 3600, ge=60, description="job time limit")
    ttl_seconds_after_finished: int = Field(24 * 3600, ge=0, description="job kept this long")
    elastic_min_nodes: int | None = Field(None, ge=1, description="elastic: fewest nodes")
    s3_secret: KubeName = Field(
        "cifar-s3", description="the steps' S3 identity: Secret with AWS_ACCESS_KEY_ID/SECRET"
    )
    mlflow_secret: KubeName | None = Field(
        None,
        description="the steps' MLflow user: Secret with MLFLOW_TRACKING_USERNAME/PASSWORD "
        "(null: an MLflow server that asks for none)",
    )
    predictor_s3_secret: KubeName = Field(
        "cifar-predictor-s3",
        description="the InferenceService's S3 identity (reads models only): a Secret like "
        "s3_secret's",
    )
    predictor_mlflow_secret: KubeName | None = Field(
        None,
        description="the InferenceService's MLflow user (reads only): a Secret like "
        "mlflow_secret's (null: none)",
    )
    job_name_prefix: str = Field(
        "cifar-train", description="PyTorchJob generateName; cut with a hash to fit 63 chars"
    )
    trainer_runtime: KubeName = Field(
        "cifar-torch-distributed",
        description="ClusterTrainingRuntime a TrainJob runs on (train.launcher=trainjob)",
    )
    coscheduling_timeout_s: int = Field(
        120, ge=1, description="coscheduling gang: seconds to wait for every pod"
    )
    run_as_user: int = Field(10001, ge=1, description="uid, gid and fsGroup of every pod")
    step_cpu: Quantity = Field("1", description="CPU request of the stage/optimize/benchmark pods")
    step_memory: Quantity = Field("4Gi", description="memory request and limit of those pods")
    optimize_gpus: int = Field(0, ge=0, description="nvidia.com/gpu of optimize and benchmark")
    step_deadline_seconds: int = Field(2 * 3600, ge=60, description="time limit of a step pod")
    retry_limit: int = Field(2, ge=0, le=10, description="retries of a step after a fault")
    retry_backoff: Duration = Field("10s", description="first retry delay, doubling: 10s, 2m, 1h")
    pvc: KubeName | None = Field(None, description="PersistentVolumeClaim mounted in every pod")
    pvc_mount_path: str = Field("/mnt/cifar", description="where cluster.pvc is mounted")
    cache_configmap: KubeName = Field(
        "cifar-pipeline-cache",
        description="ConfigMap of Argo's memoization cache (stage, train, optimize, benchmark)",
    )
    stage_cache_max_age: Duration = Field("720h", description="memoized staging reused this long")
    memo_max_age: Duration = Field(
        "720h", description="memoized train, optimize and benchmark reused this long"
    )
    pod_gc: Literal[
        "OnPodCompletion", "OnPodSuccess", "OnWorkflowCompletion", "OnWorkflowSuccess"
    ] = Field("OnWorkflowSuccess", description="when Argo deletes finished pods")
    mutex: str | None = Field(
        "cifar-pipeline", description="Argo mutex: one run at a time per namespace (null: none)"
    )
    ttl_after_success_s: int = Field(24 * 3600, ge=0, description="succeeded workflow kept")
    ttl_after_failure_s: int = Field(7 * 24 * 3600, ge=0, description="failed workflow kept")
    poll_interval_s: float = Field(10.0, gt=0, description="--wait: seconds between polls")

    @field_validator("tolerations")
    @classmethod
    def _toleration_keys(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        allowed = {"key", "operator", "value", "effect", "tolerationSeconds"}
        for i, item in enumerate(value):
            unknown = sorted(set(item) - allowed)
            if unknown:
                raise ValueError(f"[{i}] has {unknown}; allowed keys: {sorted(allowed)}")
        return value

    @model_validator(mode="after")
    def _rdma_with_ib(self) -> ClusterConfig:
        if self.rdma and self.nccl_env.get("NCCL_IB_DISABLE", "0") != "0":
            raise ValueError(
                f"rdma is true and nccl_env sets NCCL_IB_DISABLE="
                f"{self.nccl_env['NCCL_IB_DISABLE']}: drop it (rdma sets 0) or set rdma false"
            )
        return self

    @model_validator(mode="after")
    def _gang_and_elastic(self) -> ClusterConfig:
        if self.min_available is not None and self.min_available > self.nodes:
            raise ValueError(f"min_available {self.min_available} > nodes {self.nodes}")
        if self.elastic_min_nodes is not None:
            if self.nodes < 2:
                raise ValueError("elastic_min_nodes needs nodes >= 2 (elastic jobs need Workers)")
            if self.elastic_min_nodes > self.nodes:
                raise ValueError(f"elastic_min_nodes {self.elastic_min_nodes} > nodes {self.nodes}")
        return self


ImageName = Literal["data", "train", "optimize", "serve"]


class ImagesConfig(Section):
    registry: str = Field("ghcr.io/cifar-pipeline", description="image registry and path")
    tag: ImageTag = Field(default_factory=package_version, description="image tag: the version")
    digests: dict[ImageName, ImageDigest] = Field(
        default_factory=dict,
        description="image -> sha256:<64 hex> pinned (data, train, optimize, serve): "
        "referenced as name:tag@digest",
    )
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy of every step"
    )

    def image(self, step: ImageName) -> str:
        """The image reference: its tag, and its digest where the config pins one (the
        registry then serves exactly that image, whatever the tag points to now)."""
        digest = self.digests.get(step)
        return f"{self.registry}/cifar-{step}:{self.tag}" + (f"@{digest}" if digest else "")


class ScheduleConfig(Section):
    name: CronName = Field("cifar-nightly", description="CronWorkflow name (max 52 characters)")
    cron: CronSchedule = Field("0 2 * * *", description="CronWorkflow schedule (nightly retrain)")
    timezone: Timezone = Field("UTC", description="IANA time zone of the schedule")
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = Field("Forbid")
    starting_deadline_seconds: int = Field(600, ge=0, description="late start allowed")
    successful_history_limit: int = Field(3, ge=0, description="finished runs kept")
    failed_history_limit: int = Field(3, ge=0, description="failed runs kept")
