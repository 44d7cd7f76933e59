"""The inference half of ``gpu.py``: the trained ResNet-9 as the pipeline ships it on a
GPU (eager, ``torch.compile``, AOTInductor packages built as ``steps.optimize`` builds
them, TensorRT where torch-tensorrt is installed), timed call by call at each batch size.

Plain torch only, like the rest of ``gpu.py``'s path: ``steps.optimize`` itself needs the
config model (pydantic), so the few lines of its AOTInductor recipe are followed here, not
imported: BatchNorm folded into the convolutions (``torch.fx``'s ``fuse``, as
``steps.optimize.variants.fold_batchnorm``), ``torch.export`` with a dynamic batch of
``optimize.min_batch .. max_batch`` (1..256) on an example of ``opt_batch`` (64), then
``aoti_compile_and_package`` with ``freezing`` and, on a GPU, ``max_autotune``
(``optimize.aoti_freezing``, ``optimize.aoti_max_autotune``).
"""

from __future__ import annotations

import copy
import importlib.util
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.fx.experimental.optimization import fuse

from benchmarks.gpu_child import STAGE

Runner = Callable[[torch.Tensor], torch.Tensor]
MIN_BATCH, OPT_BATCH, MAX_BATCH = 1, 64, 256  # OptimizeConfig's defaults
PARITY_BATCH = 64


@dataclass
class Variant:
    """How to make one runner, the input dtype it takes, the seconds it needs at least
    (its build, on a GPU) before the budget lets it start, and its child's time limit
    (``gpu.py`` builds and times each in a process of its own: a compiler that crashes the
    process, as AOTInductor's did with SIGSEGV in torch 2.11 on an H200, loses one row)."""

    name: str
    dtype: torch.dtype
    build: Callable[[], Runner]
    needs_s: float
    limit_s: float = 120.0


@dataclass
class InferenceRow:
    variant: str
    build_s: float
    p50_ms: dict[int, float] = field(default_factory=dict)  # batch -> median ms a call
    max_abs_diff: float = 0.0  # logits against eager FP32, on PARITY_BATCH random inputs
    top1_agreement: float = 1.0

    def images_per_s(self, batch: int) -> float:
        return batch / (self.p50_ms[batch] / 1000)


def reduced_dtype(device: torch.device) -> torch.dtype:
    """The pipeline's reduced precision there: FP16 on a GPU (``optimize.gpu_precision``),
    BF16 on a CPU (``aoti_bf16``)."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def variants(
    model: nn.Module, device: torch.device, workdir: Path, max_autotune: bool
) -> list[Variant]:
    """Every variant to time, most wanted first (the budget may stop the list)."""
    half = reduced_dtype(device)
    half_name = "fp16" if half == torch.float16 else "bf16"
    model = model.eval()
    on_gpu = device.type == "cuda"
    compile_mode = "reduce-overhead" if on_gpu else None  # CUDA graphs: launch cost at batch 1
    found = [
        Variant("eager fp32", torch.float32, lambda: model, 1, 60),
        Variant(f"eager {half_name}", half, lambda: copy.deepcopy(model).to(half), 1, 60),
        Variant(
            f"torch.compile {half_name}" + (" (reduce-overhead)" if on_gpu else ""),
            half,
            lambda: torch.compile(copy.deepcopy(model).to(half), mode=compile_mode),
            60,
            180,
        ),
    ]
    autotune = [True, False] if on_gpu and max_autotune else [False]
    for dtype, dtype_name in ((half, half_name), (torch.float32, "fp32")):
        for tune in autotune if dtype == half else autotune[-1:]:
            found.append(
                Variant(
                    f"AOTInductor {dtype_name}" + (" (max-autotune)" if tune else ""),
                    dtype,
                    lambda d=dtype, tune=tune: aoti_package(model, d, device, workdir, tune),
                    120 if tune else 60,
                    240 if tune else 150,
                )
            )
    if on_gpu and importlib.util.find_spec("torch_tensorrt") is not None:
        found.append(
            Variant("TensorRT fp16", torch.float16, lambda: tensorrt_fp16(model, device), 120, 300)
        )
    return found


def aoti_package(
    model: nn.Module, dtype: torch.dtype, device: torch.device, workdir: Path, max_autotune: bool
) -> Runner:
    """An AOTInductor package of ``model`` in ``dtype``, loaded back, as the optimize step
    makes ``aoti.pt2``."""
    folded = fuse(copy.deepcopy(model).eval()).to(dtype)
    batch = torch.export.Dim("batch", min=MIN_BATCH, max=MAX_BATCH)
    example = torch.randn(OPT_BATCH, 3, 32, 32, device=device).to(dtype)
    with torch.no_grad():
        exported = torch.export.export(folded, (example,), dynamic_shapes=({0: batch},))
    options: dict[str, object] = {"freezing": True}
    if device.type == "cuda" and max_autotune:
        options["max_autotune"] = True
    path = workdir / f"aoti_{str(dtype).removeprefix('torch.')}.pt2"
    package = torch._inductor.aoti_compile_and_package(
        exported, package_path=str(path), inductor_configs=options
    )
    return torch._inductor.aoti_load_package(package)


def tensorrt_fp16(model: nn.Module, device: torch.device) -> Runner:
    """torch-tensorrt's dynamo path on the exported FP16 program, batch 1..256 (tuned at 64),
    as ``steps.optimize.tensorrt_builder`` builds ``tensorrt_fp16``."""
    import torch_tensorrt

    folded = fuse(copy.deepcopy(model).eval()).half()
    batch = torch.export.Dim("batch", min=MIN_BATCH, max=MAX_BATCH)
    example = torch.randn(OPT_BATCH, 3, 32, 32, device=device).half()
    with torch.no_grad():
        exported = torch.export.export(folded, (example,), dynamic_shapes=({0: batch},))
    shape = torch_tensorrt.Input(
        min_shape=(MIN_BATCH, 3, 32, 32),
        opt_shape=(OPT_BATCH, 3, 32, 32),
        max_shape=(MAX_BATCH, 3, 32, 32),
        dtype=torch.float16,
    )
    return torch_tensorrt.dynamo.compile(
        exported, inputs=[shape], enabled_precisions={torch.float16}
    )


def p50_ms(run: Runner, x: torch.Tensor, device: torch.device, seconds: float) -> float:
    """Median ms of one call after a warm-up: CUDA events around each call on a GPU (the
    device time of a call from an idle queue), ``perf_counter`` on a CPU."""
    with torch.no_grad():
        warm_until = time.perf_counter() + seconds / 4
        for _ in range(3):
            run(x)
        while time.perf_counter() < warm_until:
            run(x)
        times: list[float] = []
        stop = time.perf_counter() + seconds
        while len(times) < 10 or (time.perf_counter() < stop and len(times) < 2000):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record()
                run(x)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                tic = time.perf_counter()
                run(x)
                times.append((time.perf_counter() - tic) * 1000)
    return statistics.median(times)


def measure(
    variant: Variant,
    device: torch.device,
    batch_sizes: list[int],
    reference: tuple[torch.Tensor, torch.Tensor],
    seconds: float,
) -> InferenceRow:
    """Build the variant, check its logits against eager FP32's, time every batch size."""
    print(f"{STAGE}build", flush=True)  # gpu_child reads where a child stopped
    tic = time.perf_counter()
    run = variant.build()
    print(f"{STAGE}timing", flush=True)
    inputs, expected = reference
    with torch.no_grad():
        logits = run(inputs.to(variant.dtype)).float()  # the first call: compiles where lazy
    if device.type == "cuda":
        torch.cuda.synchronize()
    row = InferenceRow(variant.name, time.perf_counter() - tic)
    row.max_abs_diff = float((logits - expected).abs().max())
    row.top1_agreement = float((logits.argmax(1) == expected.argmax(1)).float().mean())
    for batch in batch_sizes:
        x = torch.randn(batch, 3, 32, 32, device=device).to(variant.dtype)
        row.p50_ms[batch] = p50_ms(run, x, device, seconds)
    return row


def reference_logits(model: nn.Module, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs and eager FP32's logits for them: what every variant is compared with."""
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(PARITY_BATCH, 3, 32, 32, generator=generator).to(device)
    with torch.no_grad():
        return inputs, model.eval()(inputs).float()
