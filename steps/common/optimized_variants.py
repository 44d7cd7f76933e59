"""The optimized variants: the variants ``steps.optimize`` saved, loaded back into callables.

``variants.json`` under OPT_URI lists every variant (built, skipped or failed) and the
weights it was made from (``steps.common.contracts.variants``); ``open_optimized`` reads it
for a trained model, and ``load_variants`` fetches and loads each built file that can run
on this device, saying why one cannot (another device, CPU ISA or a runtime not
installed). Every file reloads without the training code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from steps.common.config import StorageConfig
from steps.common.contracts.variants import VariantEntry, VariantsManifest
from steps.common.device import cpu_bf16_features, cpu_capability
from steps.common.serving.runners import Dispatcher
from steps.common.serving.torch_runners import LARGE_BATCH_PROGRAM, SMALL_BATCH_PROGRAM, load_module
from steps.common.storage import StorageError, open_store
from steps.common.trained_model import InputError, Runner, TrainedModel, read_json

VARIANTS_FILE = VariantsManifest.DOCUMENT
AOTI_PROGRAMS = (LARGE_BATCH_PROGRAM, SMALL_BATCH_PROGRAM)
PORTABLE_KINDS = ("onnx", "openvino")  # run without torch (steps.common.serving.runners)
# The variant to run when no benchmark measured them here: fastest first, as measured on a
# CPU (docs/benchmarks.md: INT8 3.5-4x FP32; OpenVINO, then ONNX Runtime, then
# AOTInductor) and on a GPU (TensorRT first); a variant that cannot run here is passed over.
# Every variant ``steps.optimize`` makes is listed (tests/test_predict.py checks).
PREFERENCE = (
    "tensorrt_int8",
    "tensorrt_fp16",
    "tensorrt_fp32",
    "onnx_tensorrt",
    "onnx_cuda",
    "openvino_int8",
    "onnx_int8",
    "aoti_bf16",
    "openvino",
    "onnx",
    "aoti",
    "torchscript",
    "export",
)


class VariantUnavailable(RuntimeError):
    """A saved variant cannot run here (other device, CPU ISA, or missing runtime)."""


@dataclass
class LoadedVariant:
    """One entry of ``variants.json`` and, where it runs here, its callable."""

    name: str
    entry: VariantEntry
    runner: Runner | None = None
    status: str = "loaded"  # loaded | unavailable | the entry's own: skipped, failed
    reason: str = ""


def open_optimized(opt_uri: str, trained: TrainedModel, storage: StorageConfig) -> VariantsManifest:
    """``variants.json`` of ``opt_uri``, which must hold variants of ``trained``'s weights."""
    manifest = read_variants(opt_uri, storage)
    if manifest.weights_sha256 != trained.weights_sha256:
        raise InputError(
            f"{opt_uri} was optimized from {manifest.model_uri}, not from {trained.uri} "
            "(weights differ); run steps.optimize on this model first"
        )
    return manifest


def load_variants(
    opt_uri: str,
    manifest: VariantsManifest,
    storage: StorageConfig,
    device: torch.device,
    workdir: Path,
    names: list[str] | None = None,
) -> Iterator[LoadedVariant]:
    """Each variant named (default: all, in ``variants.json``'s order), loaded if it was
    built and runs here; fetched lazily, so a caller may stop at the first that loads."""
    for name in names or list(manifest.variants):
        entry = manifest.variants[name]
        if not entry.built:
            yield LoadedVariant(name, entry, status=entry.status, reason=entry.reason)
            continue
        try:
            runner = load_variant_file(
                entry, fetch_variant(opt_uri, entry, storage, workdir), device
            )
        except VariantUnavailable as exc:
            yield LoadedVariant(name, entry, status="unavailable", reason=str(exc))
            continue
        yield LoadedVariant(name, entry, runner)


def variant_order(names: Iterable[str]) -> list[str]:
    """The variants ``names`` (a manifest's, in its order) to try, best first, where no
    benchmark measured them: ``PREFERENCE``, then any it does not name yet (a newer
    optimize), in their order."""
    names = list(names)
    return [n for n in dict.fromkeys([*PREFERENCE, *names]) if n in names]


def read_variants(uri: str, storage: StorageConfig) -> VariantsManifest:
    """``variants.json`` under ``uri``, read through its contract."""
    store = open_store(uri, storage)
    data = read_json(store, VARIANTS_FILE, "pass the OPT_URI that steps.optimize wrote")
    return VariantsManifest.parse(data, store.uri(VARIANTS_FILE))


def check_runs_here(entry: VariantEntry, device: torch.device) -> None:
    """Raise VariantUnavailable where ``entry`` was built for another device, CPU ISA or
    BF16 units than this machine's (read from the entry; nothing is loaded)."""
    if entry.device == "cuda" and device.type != "cuda":
        raise VariantUnavailable(f"built for CUDA ({entry.gpu}); this machine has no GPU")
    if entry.device == "cpu" and device.type != "cpu":
        raise VariantUnavailable("built for the CPU; this run uses the GPU")
    if entry.kind == "aoti" and device.type == "cpu":
        if entry.cpu_capability != cpu_capability():
            raise VariantUnavailable(
                f"compiled for CPU ISA {entry.cpu_capability}, this CPU has {cpu_capability()}"
            )
        missing = set(entry.cpu_bf16_features) - set(cpu_bf16_features())
        if entry.precision == "bf16" and missing:
            raise VariantUnavailable(f"compiled for BF16 units this CPU lacks: {sorted(missing)}")


def load_variant_file(entry: VariantEntry, path: Path, device: torch.device) -> Runner:
    """A saved variant as a callable on ``device``; raises VariantUnavailable if it can't run."""
    check_runs_here(entry, device)
    kind, details = entry.kind, entry.details
    if kind in ("torchscript", "export"):  # loaded as the served pyfunc loads them
        return load_module(kind, path, details, device)
    if kind == "aoti":
        small = details.get("small_batch", {}).get("max_batch", 0)
        if small:
            return BatchSizeDispatch(path, small)
        return torch._inductor.aoti_load_package(str(path))
    if kind in PORTABLE_KINDS:
        from steps.common.serving.runners import RuntimeMissing, load_runner

        threads = int(details.get("threads") or torch.get_num_threads())
        try:
            return TorchAdapter(load_runner(kind, path, details, threads))
        except RuntimeMissing as exc:
            raise VariantUnavailable(str(exc)) from None
    if kind == "tensorrt":
        try:
            import torch_tensorrt
        except ImportError:
            raise VariantUnavailable("torch-tensorrt is not installed") from None
        if entry.precision == "int8":
            # ModelOpt registers its quantize ops; needed only where one stayed in PyTorch.
            with contextlib.suppress(ImportError):
                import modelopt.torch.quantization  # noqa: F401
        return torch_tensorrt.load(str(path)).module()
    raise VariantUnavailable(f"unknown variant kind {kind!r}")


class TorchAdapter:
    """A numpy runner (ONNX Runtime, OpenVINO) behind the torch ``Runner`` interface."""

    def __init__(self, runner) -> None:
        self.runner = runner

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.runner(x.detach().cpu().float().numpy()))


class BatchSizeDispatch(Dispatcher):
    """An AOTInductor package holding a small-batch and a large-batch program of one model
    (see ``steps.optimize.variants.build_aoti``): batches up to ``small_max`` run the first."""

    def __init__(self, path: Path, small_max: int) -> None:
        from torch._inductor.package import load_package

        programs = {name: load_package(str(path), name) for name in AOTI_PROGRAMS}
        super().__init__(programs, {1: SMALL_BATCH_PROGRAM, small_max + 1: LARGE_BATCH_PROGRAM})
        self.small_max = small_max


def fetch_variant(opt_uri: str, entry: VariantEntry, storage: StorageConfig, workdir: Path) -> Path:
    """Download one variant's files into ``workdir``; return the local path of its file."""
    store = open_store(opt_uri, storage)
    try:
        for name in entry.files:
            if not (workdir / name).exists():  # variants may share a file (model.onnx)
                store.download_file(name, workdir / name)
    except StorageError as exc:
        raise VariantUnavailable(str(exc)) from None
    return workdir / entry.file
