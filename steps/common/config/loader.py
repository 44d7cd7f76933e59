"""The pipeline's one configuration model: every tunable is a typed, described field.

A config is a YAML file of sections (``data``, ``storage``, ``train``, ...) plus
``--set section.field=value`` overrides. ``load_config`` validates the merged result
and turns every problem into a ``ConfigError`` that names the field and where the bad
value came from (the file or the override), before anything runs.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CONFIG_PATH = REPO_ROOT / "configs" / "local.yaml"


def package_version() -> str:
    """The installed project's version: the tag every step image carries."""
    try:
        return metadata.version("cifar-pipeline")
    except metadata.PackageNotFoundError:  # running from a checkout that is not installed
        return "0.0.0+unknown"


class ConfigError(ValueError):
    """A config file or override is unreadable or invalid; the message names the field."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(Section):
    source: str = Field(
        "cifar10",
        description="cifar10 (official tarball over HTTPS), synthetic[:N] (offline, learnable), "
        "or a path / file:// / s3:// URI of cifar-10-python.tar.gz",
    )
    url: str = Field(CIFAR10_URL, description="where the cifar10 source downloads from")
    md5: str = Field(
        CIFAR10_MD5,
        description="expected md5 of the tarball (the published CIFAR-10 one); 'none' skips "
        "the check for a tarball you made yourself",
    )
    synthetic_seed: int = Field(0, description="seed of the synthetic source")
    download_retries: int = Field(4, ge=0, le=20, description="retries of the download")
    download_timeout_s: float = Field(60.0, gt=0, description="socket timeout per request")

    @field_validator("md5")
    @classmethod
    def _md5_is_hex(cls, value: str) -> str:
        if value != "none" and not re.fullmatch(r"[0-9a-f]{32}", value):
            raise ValueError(f"{value!r} is not 32 lowercase hex digits or 'none'")
        return value


class StorageConfig(Section):
    root_uri: str = Field(
        "file://./artifacts",
        description="artifact root: a directory, file:// or s3://bucket/prefix URI",
    )
    endpoint_url: str | None = Field(
        None, description="S3 endpoint (MinIO, SeaweedFS); default: AWS_ENDPOINT_URL or AWS"
    )
    region: str | None = Field(None, description="S3 region; default: the AWS profile's")
    multipart_threshold_mb: int = Field(8, ge=5, description="multipart above this size")
    multipart_chunksize_mb: int = Field(8, ge=5, description="S3 multipart part size")
    max_concurrency: int = Field(10, ge=1, le=64, description="parallel S3 transfer threads")
    connect_timeout_s: float = Field(5.0, gt=0, description="S3 connect timeout")
    max_attempts: int = Field(3, ge=1, le=10, description="S3 attempts per request")


class TrainConfig(Section):
    model: Literal["resnet9", "simplecnn"] = Field("resnet9", description="architecture")
    epochs: int = Field(10, ge=1, description="epochs to train")
    batch_size: int = Field(512, ge=1, description="global batch size (split over ranks)")
    lr: float = Field(0.2, gt=0, description="peak learning rate of the one-cycle schedule")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD nesterov momentum")
    weight_decay: float = Field(5e-4, ge=0, description="SGD weight decay")
    label_smoothing: float = Field(0.2, ge=0, lt=1, description="cross-entropy smoothing")
    warmup_epochs: float = Field(2.0, ge=0, description="linear warm-up to the peak lr")
    nproc_per_node: int | Literal["auto"] = Field(
        "auto", description="processes per node; auto: one per GPU, else 1"
    )
    seed: int = Field(0, description="seed of init and shuffling")
    amp_bf16: bool = Field(True, description="bf16 autocast on GPU")
    amp_bf16_cpu: bool | Literal["auto"] = Field(
        "auto",
        description="bf16 autocast on CPU; auto: only on CPUs with native BF16 (AMX / "
        "AVX512-BF16), where it is faster; elsewhere BF16 is emulated and slower",
    )
    channels_last: bool = Field(
        True, description="channels_last memory format (GPU, and CPU: oneDNN is faster with it)"
    )
    compile: bool = Field(False, description="torch.compile the model")
    target_accuracy: float | None = Field(
        None, gt=0, le=1, description="stop at the first epoch with this test accuracy"
    )
    checkpoint_every: int = Field(1, ge=1, description="epochs between checkpoints")
    keep_checkpoints: int = Field(
        2, ge=1, description="newest checkpoints kept; older ones are deleted (2: one spare)"
    )
    width: int = Field(64, ge=1, description="ResNet-9 base width (64: 6.6M params)")
    crop_padding: int = Field(
        4, ge=0, le=16, description="random-crop padding in pixels (reflect); 0: no crop"
    )


class OptimizeConfig(Section):
    variants: list[Literal["torchscript", "export", "aoti", "tensorrt"]] = Field(
        default_factory=lambda: ["torchscript", "export", "aoti", "tensorrt"],
        description="variants to build",
    )
    optional_variants: list[str] = Field(
        default_factory=lambda: ["tensorrt", "aoti_bf16"],
        description="variants whose failure (or absence) does not fail the step",
    )
    min_batch: int = Field(1, ge=1, description="smallest batch of the dynamic range")
    opt_batch: int = Field(64, ge=1, description="batch TensorRT tunes for")
    max_batch: int = Field(256, ge=1, description="largest batch of the dynamic range")
    fp32_max_abs_diff: float = Field(1e-3, gt=0, description="parity gate: FP32 logits")
    half_max_abs_diff: float = Field(5e-2, gt=0, description="parity gate: FP16/BF16 logits")
    min_top1_agreement: float = Field(0.995, gt=0, le=1, description="parity gate: top-1")
    parity_samples: int = Field(
        256, ge=1, description="held-out test images the parity gate compares on"
    )
    gpu_precision: Literal["fp16", "bf16"] = Field(
        "fp16", description="reduced precision of the GPU variants (AOTInductor, eager half)"
    )
    torchscript_optimize: Literal["auto", "always", "never"] = Field(
        "auto",
        description="torch.jit.optimize_for_inference after freezing; auto keeps it only "
        "where it times faster at opt_batch",
    )
    aoti_freezing: bool = Field(
        True, description="AOTInductor: fold weights into the package (CPU: prepacked convs)"
    )
    aoti_small_batch: bool = Field(
        True,
        description="AOTInductor on CPU: a second program without layout optimization in the "
        "package, used up to the batch size where it times faster",
    )
    cpu_bf16: bool = Field(
        True,
        description="also build aoti_bf16, a BF16 AOTInductor package, on CPUs with AMX or "
        "AVX512-BF16 (skipped with the reason elsewhere)",
    )
    aoti_max_autotune: bool = Field(
        True, description="AOTInductor on GPU: max-autotune kernel search (slower compile)"
    )


class BenchmarkConfig(Section):
    batch_sizes: list[int] = Field(
        default_factory=lambda: [1, 8, 64, 256], description="batch sizes to time"
    )
    warmup_iters: int = Field(10, ge=0, description="untimed iterations first")
    warmup_s: float = Field(
        1.0,
        ge=0,
        description="warm-up lasts this long at least (allocator, oneDNN, TorchScript "
        "profiling runs): small batches need hundreds of calls to reach steady state",
    )
    min_iters: int = Field(20, ge=1, description="timed iterations at least")
    time_budget_s: float = Field(2.0, gt=0, description="time budget per variant and batch")
    registered_model: str = Field("cifar10-classifier", description="MLflow registry name")
    alias: str = Field("champion", description="alias moved to a model that passes the gate")
    accuracy_margin: float = Field(0.002, ge=0, description="allowed accuracy drop vs champion")
    latency_margin: float = Field(0.10, ge=0, description="allowed relative p50 slow-down")
    max_iters: int = Field(1000, ge=1, description="timed iterations at most")
    rounds: int = Field(
        3,
        ge=1,
        description="interleaved rounds per batch size: variants take turns, so "
        "load from other processes falls on all alike",
    )
    gate_batch: int | None = Field(
        None, ge=1, description="batch whose p50 the latency gate compares; default: the largest"
    )
    accuracy_samples: int | None = Field(
        None, ge=1, description="test images each variant's accuracy is measured on; null: all"
    )


class TrackingConfig(Section):
    uri: str = Field("sqlite:///mlflow.db", description="MLflow tracking URI")
    experiment: str = Field("cifar-pipeline", description="MLflow experiment name")
    ui_url: str | None = Field(None, description="MLflow UI base URL for links; default: uri")
    startup_timeout_s: float = Field(30.0, gt=0, description="fail if unreachable this long")
    enabled: bool = Field(True, description="log to MLflow; false: a step runs untracked")
    system_metrics: bool = Field(
        True, description="log CPU/GPU/memory system metrics (needs psutil; skipped without)"
    )


class ClusterConfig(Section):
    argo_host: str | None = Field(None, description="Argo server URL; default: ARGO_HOST")
    argo_ui_url: str | None = Field(None, description="Argo UI base URL; default: argo_host")
    namespace: str = Field("argo", description="namespace of workflows and PyTorchJobs")
    verify_tls: bool = Field(True, description="verify the Argo server's certificate")
    service_account: str = Field("cifar-pipeline", description="workflow service account")
    nodes: int = Field(1, ge=1, description="PyTorchJob nodes: 1 Master + nodes-1 Workers")
    gpus_per_node: int = Field(0, ge=0, description="nvidia.com/gpu limit per pod")
    cpu: str = Field("2", description="CPU request per training pod")
    memory: str = Field("8Gi", description="memory request per training pod")
    shm_size: str = Field("2Gi", description="size of the /dev/shm memory emptyDir")
    node_selector: dict[str, str] = Field(default_factory=dict, description="pod nodeSelector")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="tolerations")
    nccl_env: dict[str, str] = Field(default_factory=dict, description="NCCL_* variables")
    rdma: bool = Field(False, description="RDMA interconnect: adds the IPC_LOCK capability")
    istio_inject: bool = Field(False, description="allow an Istio sidecar in job pods")
    scheduler_name: str | None = Field(None, description="pod schedulerName, e.g. volcano")
    queue: str | None = Field(None, description="Volcano queue for gang scheduling")
    priority_class: str | None = Field(None, description="gang scheduling priorityClass")
    min_available: int | None = Field(None, ge=1, description="gang size; default: all pods")
    clean_pod_policy: Literal["None", "Running", "All"] = Field("None", description="pods kept")
    backoff_limit: int = Field(3, ge=0, description="PyTorchJob restarts before failing")
    active_deadline_seconds: int = Field(6 * 3600, ge=60, description="job time limit")
    ttl_seconds_after_finished: int = Field(24 * 3600, ge=0, description="job kept this long")
    elastic_min_nodes: int | None = Field(None, ge=1, description="elastic: fewest nodes")
    s3_secret: str = Field("cifar-s3", description="Secret with AWS_ACCESS_KEY_ID/SECRET")
    mlflow_secret: str | None = Field(None, description="Secret with MLFLOW_TRACKING_TOKEN")
    job_name_prefix: str = Field(
        "cifar-train", description="PyTorchJob generateName; cut with a hash to fit 63 chars"
    )
    run_as_user: int = Field(10001, ge=1, description="uid, gid and fsGroup of every pod")
    step_cpu: str = Field("1", description="CPU request of the stage/optimize/benchmark pods")
    step_memory: str = Field("4Gi", description="memory request and limit of those pods")
    optimize_gpus: int = Field(0, ge=0, description="nvidia.com/gpu of optimize and benchmark")
    step_deadline_seconds: int = Field(2 * 3600, ge=60, description="time limit of a step pod")
    retry_limit: int = Field(2, ge=0, le=10, description="retries of a step after a fault")
    retry_backoff: str = Field("10s", description="first retry delay, doubling: 10s, 2m, 1h")
    pvc: str | None = Field(None, description="PersistentVolumeClaim mounted in every pod")
    pvc_mount_path: str = Field("/mnt/cifar", description="where cluster.pvc is mounted")
    cache_configmap: str = Field(
        "cifar-pipeline-cache", description="ConfigMap of Argo's memoization cache (staging)"
    )
    stage_cache_max_age: str = Field("720h", description="memoized staging reused this long")
    pod_gc: Literal[
        "OnPodCompletion", "OnPodSuccess", "OnWorkflowCompletion", "OnWorkflowSuccess"
    ] = Field("OnWorkflowSuccess", description="when Argo deletes finished pods")
    ttl_after_success_s: int = Field(24 * 3600, ge=0, description="succeeded workflow kept")
    ttl_after_failure_s: int = Field(7 * 24 * 3600, ge=0, description="failed workflow kept")
    poll_interval_s: float = Field(10.0, gt=0, description="--wait: seconds between polls")

    @field_validator("cpu", "memory", "shm_size", "step_cpu", "step_memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?", value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity, e.g. 2, 500m, 8Gi")
        return value

    @field_validator(
        "namespace", "service_account", "s3_secret", "mlflow_secret", "pvc", "cache_configmap"
    )
    @classmethod
    def _object_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
            raise ValueError(f"{value!r} is not a Kubernetes name (a-z, 0-9, '-', max 63)")
        return value

    @field_validator("retry_backoff", "stage_cache_max_age")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9]+(s|m|h)", value):
            raise ValueError(f"{value!r} is not a duration: a whole number of s, m or h")
        return value

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
    def _gang_and_elastic(self) -> ClusterConfig:
        if self.min_available is not None and self.min_available > self.nodes:
            raise ValueError(f"min_available {self.min_available} > nodes {self.nodes}")
        if self.elastic_min_nodes is not None:
            if self.nodes < 2:
                raise ValueError("elastic_min_nodes needs nodes >= 2 (elastic jobs need Workers)")
            if self.elastic_min_nodes > self.nodes:
                raise ValueError(f"elastic_min_nodes {self.elastic_min_nodes} > nodes {self.nodes}")
        return self


class ImagesConfig(Section):
    registry: str = Field("ghcr.io/cifar-pipeline", description="image registry and path")
    tag: str = Field(default_factory=package_version, description="image tag: the version")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy of every step"
    )

    @field_validator("tag")
    @classmethod
    def _not_latest(cls, value: str) -> str:
        if value == "latest" or not value:
            raise ValueError("images must be versioned: use the package version, not 'latest'")
        return value

    def image(self, step: Literal["data", "train", "optimize"]) -> str:
        return f"{self.registry}/cifar-{step}:{self.tag}"


class ScheduleConfig(Section):
    name: str = Field("cifar-nightly", description="CronWorkflow name (max 52 characters)")
    cron: str = Field("0 2 * * *", description="CronWorkflow schedule (nightly retrain)")
    timezone: str = Field("UTC", description="IANA time zone of the schedule")
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = Field("Forbid")
    starting_deadline_seconds: int = Field(600, ge=0, description="late start allowed")
    successful_history_limit: int = Field(3, ge=0, description="finished runs kept")
    failed_history_limit: int = Field(3, ge=0, description="failed runs kept")

    @field_validator("name")
    @classmethod
    def _cron_name(cls, value: str) -> str:
        # Argo names each run <name>-<10-digit time>, which must stay a 63-character name.
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?", value):
            raise ValueError(f"{value!r} is not a name of at most 52 characters a-z, 0-9, '-'")
        return value

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        if not (value.startswith("@") or len(value.split()) == 5):
            raise ValueError(f"{value!r} is not a cron expression of 5 fields (or @daily...)")
        return value


class PipelineConfig(Section):
    data: DataConfig = Field(default_factory=DataConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    optimize: OptimizeConfig = Field(default_factory=OptimizeConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    images: ImagesConfig = Field(default_factory=ImagesConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)


def _parse_override(text: str) -> tuple[list[str], Any]:
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or len(path) < 2 or not all(path):
        raise ConfigError(f"--set {text!r}: expected section.field=value, e.g. train.epochs=30")
    raw = raw.strip()
    if raw in ("null", "~"):
        return path, None
    if not raw.startswith(("[", "{")):
        # Scalars stay strings and pydantic converts them by the field's type, so that
        # "--set data.md5=0123..." keeps its leading zero and "30" still becomes an int.
        return path, raw
    try:
        return path, yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        message = str(exc).replace("\n", " ")
        raise ConfigError(f"--set {text!r}: value is not valid YAML ({message})") from None


def _apply_override(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {'.'.join(path)}: {part} is not a section")
        node = child
    node[path[-1]] = value


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    return data


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> PipelineConfig:
    """Read a config file (default: configs/local.yaml when present), apply overrides."""
    if path is None and DEFAULT_CONFIG_PATH.is_file():
        path = DEFAULT_CONFIG_PATH
    source = str(path) if path is not None else "<defaults>"
    data = _read_yaml(Path(path)) if path is not None else {}
    overridden: dict[tuple[str, ...], str] = {}
    for text in overrides:
        keys, value = _parse_override(text)
        _apply_override(data, keys, value)
        overridden[tuple(keys)] = text
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(str(part) for part in err["loc"])
            origin = next(
                (f"--set {text}" for keys, text in overridden.items() if loc[: len(keys)] == keys),
                source,
            )
            problems.append(f"{origin}: {'.'.join(loc)}: {err['msg']}")
        raise ConfigError("; ".join(problems)) from None


def dump_config(cfg: PipelineConfig) -> dict[str, Any]:
    """Plain data of a config, e.g. for logging every field as an MLflow param."""
    return cfg.model_dump(mode="json")


def flatten(cfg: PipelineConfig) -> dict[str, str]:
    """``section.field -> str(value)`` for every field."""
    flat: dict[str, str] = {}
    for section, fields in dump_config(cfg).items():
        for name, value in fields.items():
            flat[f"{section}.{name}"] = str(value)
    return flat


def describe() -> list[tuple[str, str, str, str]]:
    """``(field, type, default, description)`` for every field, in declaration order."""
    rows = []
    for section, info in PipelineConfig.model_fields.items():
        model = info.default_factory()  # type: ignore[misc]
        for name, field in type(model).model_fields.items():
            ann = field.annotation
            annotation = ann.__name__ if isinstance(ann, type) else str(ann)
            annotation = annotation.replace("typing.", "")
            rows.append(
                (
                    f"{section}.{name}",
                    annotation,
                    str(getattr(model, name)),
                    field.description or "",
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m steps.config [--config FILE] [--set k=v]``: validate and print a config;
    ``--describe`` lists every field with its type, default and meaning."""
    import argparse
    import sys

    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(prog="python -m steps.config", description=main.__doc__)
    parser.add_argument("--config", help="config YAML (default: configs/local.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--describe", action="store_true", help="list every field")
    args = parser.parse_args(argv)
    console = Console(soft_wrap=True)
    if args.describe:
        table = Table("field", "type", "default", "description")
        for row in describe():
            table.add_row(*row)
        console.print(table)
        return 0
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"config: error: {exc}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(dump_config(cfg), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
