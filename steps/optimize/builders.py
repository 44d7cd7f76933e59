"""The builders of the torch-based variants: TorchScript, ``torch.export`` and AOTInductor
(TensorRT: ``tensorrt_builder``; ONNX and OpenVINO: ``portable``), and the table of all
builders by kind. Each writes one file and returns its details.
"""

from __future__ import annotations

import copy
import importlib
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._inductor.package import load_package, package_aoti

from steps.common.device import cpu_bf16_features
from steps.common.optimized_variants import AOTI_PROGRAMS, LARGE_BATCH_PROGRAM, SMALL_BATCH_PROGRAM
from steps.common.trained_model import DTYPES
from steps.optimize.portable import build_onnx, build_openvino
from steps.optimize.tensorrt_builder import build_tensorrt
from steps.optimize.variants import BuildContext, SkipVariant, Spec, median_ms

SMALL_BATCH_PROBE_LIMIT = 64  # past this, the large-batch program is the one that counts


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
            plain_ms, opt_ms = median_ms(frozen, example), median_ms(optimized, example)
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
        ms = {name: round(median_ms(prog, x, iters), 3) for name, prog in programs.items()}
        timings[str(batch)] = ms
        if ms[SMALL_BATCH_PROGRAM] >= ms[LARGE_BATCH_PROGRAM]:
            break
        best = batch
        batch *= 2
    return {"max_batch": best, "timing_ms": timings}


BUILDERS = {
    "torchscript": build_torchscript,
    "export": build_export,
    "aoti": build_aoti,
    "tensorrt": build_tensorrt,
    "onnx": build_onnx,
    "openvino": build_openvino,
}


Builder = Callable[[Spec, BuildContext, Path], dict[str, Any]]


def builder_for(spec: Spec) -> Builder:
    """The builder of ``spec``: its kind's, or an extra variant's own (``module:function``,
    imported here, in the build process)."""
    if not spec.builder:
        return BUILDERS[spec.kind]
    module, _, function = spec.builder.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(
            f"optimize.extra_variants {spec.name}: builder {spec.builder} not found ({exc})"
        ) from None
