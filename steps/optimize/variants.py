"""Building the optimized variants of a trained model, and the parity gate each must pass.

| variant | file | made by | precision |
| --- | --- | --- | --- |
| torchscript | torchscript.pt | trace, freeze, optimize_for_inference if faster | fp32 |
| export | export.pt2 | ``torch.export``, dynamic batch dimension | fp32 |
| aoti | aoti.pt2 | AOTInductor package of the exported program | fp32; GPU fp16/bf16 |
| aoti_bf16 | aoti_bf16.pt2 | the same in BF16, CPUs with AMX / AVX512-BF16 only | bf16 |
| tensorrt_fp32/16 | tensorrt_*.ep | torch-tensorrt dynamo path, exported program | fp32, fp16 |

TorchScript is built because the seed articles ask for it, although upstream now
deprecates it in favour of ``torch.export``. Every file reloads without the training code.
"""

from __future__ import annotations

import copy
import inspect
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch._inductor.package import load_package, package_aoti
from torch.fx.experimental.optimization import fuse

from steps.common.config import OptimizeConfig
from steps.common.device import cpu_bf16_features, cpu_capability
from steps.common.inference import (
    AOTI_PROGRAMS,
    DTYPES,
    LARGE_BATCH_PROGRAM,
    SMALL_BATCH_PROGRAM,
    Runner,
    load_variant_file,
    run_batched,
)

KINDS = ("torchscript", "export", "aoti", "tensorrt")
NAMES = ("torchscript", "export", "aoti", "aoti_bf16", "tensorrt_fp32", "tensorrt_fp16")
SMALL_BATCH_PROBE_LIMIT = 64  # past this, the large-batch program is the one that counts


class ParityError(RuntimeError):
    """A variant's logits differ from eager beyond the configured thresholds."""

    def __init__(self, message: str, entry: dict[str, Any]) -> None:
        super().__init__(message)
        self.entry = entry  # the variant's record, parity numbers included


class SkipVariant(RuntimeError):
    """The variant cannot be built here (no CUDA, no torch-tensorrt); the message says why."""


@dataclass
class Spec:
    name: str
    kind: str
    precision: str
    file: str


@dataclass
class BuildContext:
    model: nn.Module  # eager FP32, eval mode, on ``device``
    device: torch.device
    cfg: OptimizeConfig
    workdir: Path
    _exported: dict[str, torch.export.ExportedProgram] = field(default_factory=dict)
    batchnorm_folded: bool = False

    def example(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        # Batch 2 or more: torch.export specialises sizes 0 and 1.
        batch = max(2, min(self.cfg.opt_batch, self.cfg.max_batch))
        return torch.randn(batch, 3, 32, 32, device=self.device).to(dtype)

    def batch_dim(self) -> torch.export.Dim:
        return torch.export.Dim("batch", min=self.cfg.min_batch, max=self.cfg.max_batch)

    def exported(self, precision: str = "fp32") -> torch.export.ExportedProgram:
        """The model exported once per precision, batch dynamic within [min, max], with
        BatchNorm folded into the convolutions (fewer ops for every consumer)."""
        if precision not in self._exported:
            dtype = DTYPES[precision]
            model, self.batchnorm_folded = fold_batchnorm(self.model)
            model = model if precision == "fp32" else model.to(dtype)
            with torch.no_grad():
                self._exported[precision] = torch.export.export(
                    model, (self.example(dtype),), dynamic_shapes=({0: self.batch_dim()},)
                )
        return self._exported[precision]


def fold_batchnorm(model: nn.Module) -> tuple[nn.Module, bool]:
    """A copy with each eval-mode BatchNorm folded into the convolution before it (and
    True); an unchanged copy (and False) where the model does not trace symbolically."""
    try:
        return fuse(model), True
    except Exception:  # torch.fx cannot trace every model; folding is only an optimization
        return copy.deepcopy(model), False


def specs(kinds: list[str], device: torch.device, cfg: OptimizeConfig) -> list[Spec]:
    """The variants the configured kinds expand to on this device."""
    half = cfg.gpu_precision if device.type == "cuda" else "fp32"
    aoti = [Spec("aoti", "aoti", half, "aoti.pt2")]
    if device.type == "cpu" and cfg.cpu_bf16:
        aoti.append(Spec("aoti_bf16", "aoti", "bf16", "aoti_bf16.pt2"))
    table = {
        "torchscript": [Spec("torchscript", "torchscript", "fp32", "torchscript.pt")],
        "export": [Spec("export", "export", "fp32", "export.pt2")],
        "aoti": aoti,
        "tensorrt": [
            Spec("tensorrt_fp32", "tensorrt", "fp32", "tensorrt_fp32.ep"),
            Spec("tensorrt_fp16", "tensorrt", "fp16", "tensorrt_fp16.ep"),
        ],
    }
    return [spec for kind in kinds for spec in table[kind]]


def _median_ms(fn: Runner, x: torch.Tensor, iters: int = 5) -> float:
    with torch.inference_mode():
        fn(x)
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            fn(x)
            if x.is_cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1000


def build_torchscript(spec: Spec, ctx: BuildContext, path: Path) -> dict[str, Any]:
    """Trace and freeze. ``optimize_for_inference`` output does not survive save/load (its
    prepacked MKLDNN constants fail to deserialise), so the file holds the frozen module and
    the loader applies the pass when ``details.optimize_for_inference`` says it helps."""
    example = ctx.example()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # TorchScript's deprecation notice, documented above
        frozen = torch.jit.freeze(torch.jit.trace(ctx.model, example))
        torch.jit.save(frozen, str(path))
        details: dict[str, Any] = {"frozen": True, "optimize_for_inference": False}
        mode = ctx.cfg.torchscript_optimize
        if mode == "always":
            details["optimize_for_inference"] = True
        elif mode == "auto":
            optimized = torch.jit.optimize_for_inference(copy.deepcopy(frozen))
            plain_ms, opt_ms = _median_ms(frozen, example), _median_ms(optimized, example)
            details["timing_ms"] = {"frozen": round(plain_ms, 3), "optimized": round(opt_ms, 3)}
            details["optimize_for_inference"] = opt_ms < plain_ms
    return details


def build_export(spec: Spec, ctx: BuildContext, path: Path) -> dict[str, Any]:
    torch.export.save(ctx.exported("fp32"), str(path))
    return {
        "dynamic_batch": [ctx.cfg.min_batch, ctx.cfg.max_batch],
        "batchnorm_folded": ctx.batchnorm_folded,
    }


def _cxx_compiler() -> str | None:
    return shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def build_aoti(spec: Spec, ctx: BuildContext, path: Path) -> dict[str, Any]:
    """One package, one program per batch regime. On CPU, Inductor's layout optimization
    (channels_last activations around prepacked oneDNN convolutions) wins at large batches
    and loses at the smallest (measured on an AVX2 EPYC: 1.8x eager at batch 256 but 0.6x at
    batch 1), so the package also holds the program compiled without it, and the loader
    runs that one up to the largest batch where it timed faster here."""
    native_bf16 = cpu_bf16_features()
    if ctx.device.type == "cpu" and spec.precision == "bf16" and not native_bf16:
        raise SkipVariant("this CPU has no native BF16 (AMX or AVX512-BF16); FP32 is faster")
    compiler = _cxx_compiler()
    if compiler is None:
        raise RuntimeError("AOTInductor needs a C++ compiler (g++); none on PATH")
    options: dict[str, Any] = {"freezing": ctx.cfg.aoti_freezing}
    if ctx.device.type == "cuda" and ctx.cfg.aoti_max_autotune:
        options["max_autotune"] = True
    programs = {LARGE_BATCH_PROGRAM: options}
    if ctx.device.type == "cpu" and ctx.cfg.aoti_small_batch:
        programs[SMALL_BATCH_PROGRAM] = {**options, "layout_optimization": False}
    exported = ctx.exported(spec.precision)
    files = {name: _aot_compile(exported, opts) for name, opts in programs.items()}
    details: dict[str, Any] = {"inductor_configs": options, "cxx": compiler}
    package_aoti(str(path), files)
    if SMALL_BATCH_PROGRAM in files:
        details["small_batch"] = _small_batch_crossover(path, spec, ctx)
        if details["small_batch"]["max_batch"] == 0:  # never faster here: ship one program
            package_aoti(str(path), {LARGE_BATCH_PROGRAM: files[LARGE_BATCH_PROGRAM]})
    return details


def _aot_compile(exported: torch.export.ExportedProgram, options: dict[str, Any]) -> list:
    """``aoti_compile_and_package`` split in two, as its documentation shows for packages
    holding several programs: compile here, package once all are built."""
    try:
        module = exported.module(check_guards=False)
    except TypeError:  # releases before the flag
        module = exported.module()
    args, kwargs = exported.example_inputs
    options = {**options, "aot_inductor.package": True}
    return torch._inductor.aot_compile(module, args, kwargs, options=options)


def _small_batch_crossover(path: Path, spec: Spec, ctx: BuildContext) -> dict[str, Any]:
    """Time both programs at batch 1, 2, 4, ... until the small-batch one stops winning;
    ``max_batch`` is the largest batch it won (0: never)."""
    programs = {name: load_package(str(path), name) for name in AOTI_PROGRAMS}
    dtype = DTYPES[spec.precision]
    limit = min(ctx.cfg.max_batch, SMALL_BATCH_PROBE_LIMIT)
    timings: dict[str, dict[str, float]] = {}
    best = 0
    batch = max(1, ctx.cfg.min_batch)
    while batch <= limit:
        x = torch.randn(batch, 3, 32, 32, device=ctx.device).to(dtype)
        iters = max(5, 32 // batch)  # small batches are quick and noisy: more calls
        ms = {name: round(_median_ms(prog, x, iters), 3) for name, prog in programs.items()}
        timings[str(batch)] = ms
        if ms[SMALL_BATCH_PROGRAM] >= ms[LARGE_BATCH_PROGRAM]:
            break
        best = batch
        batch *= 2
    return {"max_batch": best, "timing_ms": timings}


def build_tensorrt(spec: Spec, ctx: BuildContext, path: Path) -> dict[str, Any]:
    if ctx.device.type != "cuda":
        raise SkipVariant("no CUDA device (torch.cuda.is_available() is False)")
    try:
        import torch_tensorrt
    except ImportError:
        raise SkipVariant(
            "torch-tensorrt is not installed (pip install 'cifar-pipeline[tensorrt]')"
        ) from None
    cfg, dtype = ctx.cfg, DTYPES[spec.precision]
    shape = (3, 32, 32)
    inputs = [
        torch_tensorrt.Input(
            min_shape=(cfg.min_batch, *shape),
            opt_shape=(cfg.opt_batch, *shape),
            max_shape=(cfg.max_batch, *shape),
            dtype=dtype,
        )
    ]
    # Current releases take reduced precision from the model's own dtype with explicit
    # typing; ``enabled_precisions`` is deprecated. Older releases only know the latter.
    options: dict[str, Any] = {"min_block_size": 1}
    accepted = inspect.signature(torch_tensorrt.dynamo.compile).parameters
    if "use_explicit_typing" in accepted:
        options["use_explicit_typing"] = True
    else:
        options["enabled_precisions"] = {dtype}
    if spec.precision == "fp32" and "disable_tf32" in accepted:
        options["disable_tf32"] = True  # FP32 means FP32: held to the FP32 parity limit
    module = torch_tensorrt.dynamo.compile(ctx.exported(spec.precision), inputs=inputs, **options)
    torch_tensorrt.save(
        module,
        str(path),
        output_format="exported_program",
        arg_inputs=[ctx.example(dtype)],
        dynamic_shapes=({0: ctx.batch_dim()},),
        retrace=True,
    )
    return {"torch_tensorrt": torch_tensorrt.__version__, "compile_options": sorted(options)}


BUILDERS = {
    "torchscript": build_torchscript,
    "export": build_export,
    "aoti": build_aoti,
    "tensorrt": build_tensorrt,
}


def parity(
    runner: Runner,
    spec: Spec,
    x: torch.Tensor,
    reference: torch.Tensor,
    cfg: OptimizeConfig,
) -> dict[str, Any]:
    """Max |logit difference| and top-1 agreement against eager on held-out images, run in
    chunks of max_batch and once at min_batch (both ends of the dynamic range)."""
    inputs = x.to(DTYPES[spec.precision])
    logits = run_batched(runner, inputs, cfg.max_batch, cfg.min_batch)
    small = run_batched(runner, inputs[: cfg.min_batch], cfg.min_batch, cfg.min_batch)
    diff = (logits - reference.float()).abs().max().item()
    diff = max(diff, (small - reference[: cfg.min_batch].float()).abs().max().item())
    agree = (logits.argmax(1) == reference.argmax(1)).float().mean().item()
    limit = cfg.fp32_max_abs_diff if spec.precision == "fp32" else cfg.half_max_abs_diff
    return {
        "samples": len(x),
        "max_abs_diff": diff,
        "top1_agreement": agree,
        "max_abs_diff_limit": limit,
        "min_top1_agreement": cfg.min_top1_agreement,
        "passed": diff <= limit and agree >= cfg.min_top1_agreement,
    }


def parity_message(name: str, precision: str, result: dict[str, Any]) -> str:
    """One line naming the variant, the numbers and the limits that were crossed."""
    field_name = "fp32_max_abs_diff" if precision == "fp32" else "half_max_abs_diff"
    diff_op = ">" if result["max_abs_diff"] > result["max_abs_diff_limit"] else "<="
    agree_op = "<" if result["top1_agreement"] < result["min_top1_agreement"] else ">="
    return (
        f"{name} ({precision}) failed the parity gate on {result['samples']} held-out images: "
        f"max |logit diff| {result['max_abs_diff']:.3g} {diff_op} {result['max_abs_diff_limit']:g} "
        f"(optimize.{field_name}), top-1 agreement {result['top1_agreement']:.4f} {agree_op} "
        f"{result['min_top1_agreement']:g} (optimize.min_top1_agreement)"
    )


def build_one(
    spec: Spec, ctx: BuildContext, x: torch.Tensor, reference: torch.Tensor
) -> dict[str, Any]:
    """Build, save, reload from the file, and gate one variant; raises on any failure."""
    path = ctx.workdir / spec.file
    start = time.perf_counter()
    details = BUILDERS[spec.kind](spec, ctx, path)
    seconds = time.perf_counter() - start
    entry: dict[str, Any] = {
        "kind": spec.kind,
        "file": spec.file,
        "precision": spec.precision,
        "device": ctx.device.type,
        "gpu": torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else None,
        "cpu_capability": cpu_capability(),
        "cpu_bf16_features": cpu_bf16_features(),
        "size_bytes": path.stat().st_size,
        "build_seconds": round(seconds, 3),
        "details": details,
    }
    runner = load_variant_file(entry, path, ctx.device)
    entry["parity"] = parity(runner, spec, x, reference, ctx.cfg)
    if not entry["parity"]["passed"]:
        raise ParityError(parity_message(spec.name, spec.precision, entry["parity"]), entry)
    return entry
