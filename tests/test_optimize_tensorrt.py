"""TensorRT INT8 (ModelOpt PTQ, then torch-tensorrt): what a CPU-only machine can check.

The gate records every absent prerequisite (CUDA, torch-tensorrt, nvidia-modelopt) as the
skip reason; the build context hands over the training images INT8 calibrates on; the
builder's modules import nothing CUDA-only; where ModelOpt is importable, calibration sets
every quantizer's range and the fake-quantized model agrees with eager. Not run without a
GPU: the quantized model's export (ModelOpt traces its QDQ ops only on CUDA), the TensorRT
compile, the saved engine and its parity gate (tests/test_optimize.py, GPU only)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from steps.common.config import OptimizeConfig
from steps.common.models import build_model
from steps.optimize.tensorrt_builder import (
    build_tensorrt,
    calibrated_int8,
    compile_options,
    missing_prerequisites,
)
from steps.optimize.variants import BuildContext, SkipVariant, Spec
from tests.helpers.paths import REPO_ROOT

HAS_MODELOPT = importlib.util.find_spec("modelopt") is not None
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"
NO_TRT = "torch-tensorrt is not installed (pip install 'cifar-pipeline[tensorrt]')"
NO_MODELOPT = "nvidia-modelopt is not installed (pip install 'cifar-pipeline[tensorrt]')"


def _context(tmp_path: Path, calibration: torch.Tensor | None, device: str = "cpu"):
    torch.manual_seed(0)
    model = build_model("resnet9", 10, 8).eval()
    cfg = OptimizeConfig(min_batch=1, opt_batch=8, max_batch=32)
    return BuildContext(model, torch.device(device), cfg, tmp_path, calibration)


@pytest.mark.parametrize(
    ("precision", "device", "absent", "reasons"),
    [
        ("int8", "cpu", ["torch_tensorrt", "modelopt"], [NO_CUDA, NO_TRT, NO_MODELOPT]),
        ("int8", "cuda", ["torch_tensorrt", "modelopt"], [NO_TRT, NO_MODELOPT]),
        ("fp16", "cuda", ["torch_tensorrt", "modelopt"], [NO_TRT]),  # FP16 needs no ModelOpt
        ("fp32", "cpu", ["torch_tensorrt", "modelopt"], [NO_CUDA, NO_TRT]),
    ],
    ids=["int8-nothing", "int8-gpu-no-packages", "fp16-no-trt", "fp32-no-gpu"],
)
def test_every_absent_prerequisite_is_a_reason(
    monkeypatch: pytest.MonkeyPatch,
    precision: str,
    device: str,
    absent: list[str],
    reasons: list[str],
) -> None:
    for module in absent:  # None in sys.modules: Python's own "cannot be imported"
        monkeypatch.setitem(sys.modules, module, None)
    assert missing_prerequisites(precision, torch.device(device)) == reasons


def test_int8_on_a_cpu_is_skipped_naming_each_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "modelopt", None)
    spec = Spec("tensorrt_int8", "tensorrt", "int8", "tensorrt_int8.ep")
    with pytest.raises(SkipVariant) as skipped:
        build_tensorrt(spec, _context(tmp_path, torch.randn(4, 3, 32, 32)), tmp_path / spec.file)
    assert str(skipped.value).startswith(f"{NO_CUDA}; ")
    assert str(skipped.value).endswith(NO_MODELOPT)
    assert not (tmp_path / spec.file).exists()


def test_calibration_batches_yield_every_image_once_in_order(tmp_path: Path) -> None:
    # One source for every INT8 builder: ModelOpt's forward loop, ORT and NNCF (as numpy).
    images = torch.randn(70, 3, 32, 32)
    batches = _context(tmp_path, images).calibration_batches(32)
    assert [len(b) for b in batches] == [32, 32, 6]
    assert torch.equal(torch.cat(batches), images)


@pytest.mark.parametrize("calibration", [None, torch.empty(0, 3, 32, 32)], ids=["none", "empty"])
def test_calibration_batches_need_images(tmp_path: Path, calibration) -> None:
    with pytest.raises(RuntimeError, match="INT8 calibration needs training images"):
        _context(tmp_path, calibration).calibration_batches()


@pytest.mark.parametrize(
    ("precision", "accepted", "expected"),
    [
        (
            "int8",
            {"enabled_precisions", "use_explicit_typing"},
            {"min_block_size": 1, "enabled_precisions": {torch.int8}},
        ),
        (
            "fp16",
            {"enabled_precisions", "use_explicit_typing"},
            {"min_block_size": 1, "use_explicit_typing": True},
        ),
        (
            "fp16",
            {"enabled_precisions"},
            {"min_block_size": 1, "enabled_precisions": {torch.float16}},
        ),
        (
            "fp32",
            {"use_explicit_typing", "disable_tf32"},
            {"min_block_size": 1, "use_explicit_typing": True, "disable_tf32": True},
        ),
    ],
    ids=["int8", "fp16-explicit-typing", "fp16-older-release", "fp32"],
)
def test_compile_options(precision: str, accepted: set[str], expected: dict) -> None:
    dtype = {"int8": torch.float32, "fp16": torch.float16, "fp32": torch.float32}[precision]
    assert compile_options(precision, dtype, accepted) == expected


def test_builder_modules_import_nothing_cuda_only() -> None:
    code = (
        "import sys\n"
        "import steps.optimize.builders, steps.optimize.tensorrt_builder, steps.optimize.step\n"
        "import steps.common.optimized_variants\n"
        "roots = {'torch_tensorrt', 'tensorrt', 'modelopt'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in roots))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(not HAS_MODELOPT, reason="needs nvidia-modelopt (the tensorrt extra)")
def test_int8_calibration_sets_every_range_and_agrees_with_eager(tmp_path: Path) -> None:
    # ModelOpt's fake quantization runs on a CPU; its export (quantized_program) and the
    # TensorRT compile need CUDA.
    from modelopt.torch.quantization.nn import TensorQuantizer

    torch.manual_seed(1)
    images = torch.randn(96, 3, 32, 32)
    ctx = _context(tmp_path, images[:64])
    model = calibrated_int8(ctx)
    quantizers = {name: q for name, q in model.named_modules() if isinstance(q, TensorQuantizer)}
    enabled = {name: q for name, q in quantizers.items() if q.is_enabled}
    assert any(name.endswith("weight_quantizer") for name in enabled), sorted(quantizers)
    assert any(name.endswith("input_quantizer") for name in enabled), sorted(quantizers)
    for name, quantizer in enabled.items():
        assert quantizer.amax is not None and bool((quantizer.amax > 0).all()), name
    assert not any(isinstance(m, TensorQuantizer) for m in ctx.model.modules())  # a copy
    held_out = images[64:]
    with torch.no_grad():
        eager, quantized = ctx.model(held_out), model(held_out)
    assert not torch.equal(eager, quantized)  # quantized: close to eager, not equal
    agreement = (eager.argmax(1) == quantized.argmax(1)).float().mean().item()
    assert agreement >= 0.9, agreement
