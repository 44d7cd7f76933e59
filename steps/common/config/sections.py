"""The sections every step reads: data, storage, train, optimize, benchmark, tracking."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from steps.common.config.fields import DataSource, Md5, Processes, Section, StorageUri

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"


class DataConfig(Section):
    source: DataSource = Field(
        "cifar10",
        description="cifar10 (official tarball over HTTPS), synthetic[:N] (offline, learnable), "
        "or a path / file:// / s3:// URI of cifar-10-python.tar.gz",
    )
    url: str = Field(CIFAR10_URL, description="where the cifar10 source downloads from")
    md5: Md5 = Field(
        CIFAR10_MD5,
        description="expected md5 of the tarball (the published CIFAR-10 one); 'none' skips "
        "the check for a tarball you made yourself",
    )
    synthetic_seed: int = Field(0, description="seed of the synthetic source")
    download_retries: int = Field(4, ge=0, le=20, description="retries of the download")
    download_timeout_s: float = Field(60.0, gt=0, description="socket timeout per request")


class StorageConfig(Section):
    root_uri: StorageUri = Field(
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
    nproc_per_node: Processes = Field(
        "auto", description="processes per node; auto: one per GPU, else 1"
    )
    seed: int = Field(0, description="seed of init and shuffling")
    launcher: Literal["pytorchjob", "trainjob"] = Field(
        "pytorchjob",
        description="on a cluster: a Kubeflow Training Operator v1 PyTorchJob, or a Kubeflow "
        "Trainer v2 TrainJob on cluster.trainer_runtime (a local run is torchrun either way)",
    )
    amp_bf16: bool = Field(True, description="bf16 autocast on GPU")
    amp_bf16_cpu: bool | Literal["auto"] = Field(
        "auto",
        description="bf16 autocast on CPU; auto: only on CPUs with native BF16 (AMX / "
        "AVX512-BF16), where it is faster; elsewhere BF16 is emulated and slower",
    )
    channels_last: bool = Field(
        True, description="channels_last memory format (GPU, and CPU: oneDNN is faster with it)"
    )
    compile: bool = Field(
        False,
        description="torch.compile the model; off by default: on an H200 it gained 4 percent an "
        "epoch for 16 s of compiling, a loss on a run that reaches 90 percent in 2 s",
    )
    compile_mode: Literal[
        "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"
    ] = Field(
        "default",
        description="torch.compile's mode when train.compile; reduce-overhead replays each "
        "step as a CUDA graph (every training batch has the same shape)",
    )
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


VariantKind = Literal["torchscript", "export", "aoti", "tensorrt", "onnx", "openvino"]


class ExtraVariant(Section):
    """A variant made by a builder of your own, loaded back and gated as its ``kind``."""

    name: str = Field(
        pattern=r"^[a-z][a-z0-9_]*$",
        description="its name in variants.json and the report (not a built-in variant's)",
    )
    kind: VariantKind = Field(
        description="the built-in kind whose loader reads its file back for the parity gate "
        "and the benchmark (its builder writes that kind's format)",
    )
    builder: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="module:function, importable where optimize runs; called in the build "
        "process as function(spec, ctx, path) (steps.optimize.builders' signature), it "
        "writes path and returns the details its kind's loader reads",
    )
    precision: Literal["fp32", "fp16", "bf16", "int8"] = Field(
        "fp32", description="the precision its input is cast to"
    )
    file: str = Field(
        "", description="the file it writes under OPT_URI; empty: <name> and its kind's suffix"
    )


class OptimizeConfig(Section):
    variants: list[VariantKind] = Field(
        default_factory=lambda: [
            "torchscript",
            "export",
            "aoti",
            "tensorrt",
            "onnx",
            "openvino",
        ],
        description="variants to build (onnx and openvino include their INT8 variants)",
    )
    optional_variants: list[str] = Field(
        default_factory=lambda: [
            "tensorrt",
            "aoti_bf16",
            "onnx_int8",
            "openvino_int8",
            "onnx_cuda",
            "onnx_tensorrt",
        ],
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
    int8: bool = Field(True, description="also build INT8 (post-training static) variants")
    int8_min_agreement: float = Field(
        0.99,
        gt=0,
        le=1,
        description="INT8 gate: top-1 agreement with eager FP32 on the test split; one below "
        "is not shipped",
    )
    int8_parity_samples: int = Field(
        2000, ge=1, description="test images the INT8 gate compares on"
    )
    calibration_samples: int = Field(
        300, ge=1, description="training images INT8 quantization calibrates on"
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description="intra-op threads of ONNX Runtime and OpenVINO; null: torch's thread count",
    )
    openvino_throughput_batch: int = Field(
        64,
        ge=1,
        description="OpenVINO: batches this large or larger run under the THROUGHPUT hint "
        "(several streams), smaller ones under LATENCY",
    )
    build_timeout_s: float = Field(
        1800.0,
        gt=0,
        description="seconds one variant's build may take in its build process (export, "
        "compile, save, reload, parity gate); past it the process is stopped and the variant "
        "recorded as failed (timed out), as a crash is: the others are still built",
    )
    variants_per_process: int | None = Field(
        None,
        ge=1,
        description="variants one build process builds before a fresh one is started; 1: "
        "each in a process of its own (a spawn and a torch import each); null: one process "
        "for all, replaced only after a variant crashed or hung in it",
    )
    extra_variants: list[ExtraVariant] = Field(
        default_factory=list,
        description="variants made by builders of your own (ExtraVariant: name, kind, "
        "builder as module:function, precision, file), built after the configured ones in "
        "the same build process, gate and records",
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
    load_timeout_s: float = Field(
        600.0,
        gt=0,
        description="seconds a variant's first load and run (once per batch size) may take "
        "in a child process before this step loads it; one that crashes there, or runs past "
        "this, is recorded as failed and not measured, and the others are",
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
