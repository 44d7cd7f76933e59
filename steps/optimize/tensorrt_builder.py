"""The TensorRT variants, torch-tensorrt's dynamo path: FP32 and FP16 compiled from the
exported program, and INT8 as NVIDIA documents it for torch-tensorrt: post-training
quantization with TensorRT Model Optimizer (``modelopt.torch.quantization``: quantize /
dequantize nodes calibrated on training images), exported under ModelOpt's
``export_torch_mode`` and compiled with ``enabled_precisions={torch.int8}``.

torch-tensorrt and ModelOpt need CUDA and are imported only inside the builder, so this
module imports on any machine; ``missing_prerequisites`` names every absent one, and the
variant is recorded as skipped with those reasons.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import inspect
from pathlib import Path
from typing import Any

import torch

from steps.common.trained_model import DTYPES
from steps.optimize.variants import BuildContext, SkipVariant, Spec

# What the tensorrt extra installs (pyproject.toml), named in the skip reasons.
PACKAGES = {"torch_tensorrt": "torch-tensorrt", "modelopt": "nvidia-modelopt"}


def missing_prerequisites(precision: str, device: torch.device) -> list[str]:
    """Why a TensorRT variant of ``precision`` cannot be built on ``device``: every absent
    prerequisite, one reason each (empty: it can be built)."""
    reasons = []
    if device.type != "cuda":
        reasons.append("no CUDA device (torch.cuda.is_available() is False)")
    modules = ["torch_tensorrt", *(["modelopt"] if precision == "int8" else [])]
    for module in modules:
        if importlib.util.find_spec(module) is None:
            reasons.append(
                f"{PACKAGES[module]} is not installed (pip install 'cifar-pipeline[tensorrt]')"
            )
    return reasons


def calibrated_int8(ctx: BuildContext) -> torch.nn.Module:
    """A copy of the eager model with ModelOpt's INT8 quantizers (per-channel weights,
    per-tensor activations), their ranges calibrated on ``ctx.calibration_batches()``: the
    images the ONNX Runtime and OpenVINO INT8 variants calibrate on."""
    import modelopt.torch.quantization as mtq

    model = copy.deepcopy(ctx.model).eval()  # mtq.quantize replaces layers in place
    batches = ctx.calibration_batches()

    def forward_loop(quantized: torch.nn.Module) -> None:
        with torch.no_grad():
            for images in batches:
                quantized(images.to(ctx.device))

    mtq.quantize(model, mtq.INT8_DEFAULT_CFG, forward_loop=forward_loop)
    return model


def quantized_program(ctx: BuildContext) -> tuple[torch.export.ExportedProgram, dict[str, Any]]:
    """``calibrated_int8`` exported with the dynamic batch dimension. Only on CUDA: there
    ModelOpt's quantizers trace as ``tensorrt::quantize_op`` (QDQ for TensorRT); on a CPU
    they fall back to a fake quantization that ``torch.export`` cannot trace."""
    from modelopt.torch.quantization.utils import export_torch_mode

    model = calibrated_int8(ctx)
    with torch.no_grad(), export_torch_mode():
        exported = torch.export.export(
            model, (ctx.example(),), dynamic_shapes=({0: ctx.batch_dim()},), strict=False
        )
    details = {
        "quantization": "modelopt INT8_DEFAULT_CFG",
        "calibration_images": len(ctx.calibration),
    }
    return exported, details


def build_tensorrt(spec: Spec, ctx: BuildContext, path: Path) -> dict[str, Any]:
    reasons = missing_prerequisites(spec.precision, ctx.device)
    if reasons:
        raise SkipVariant("; ".join(reasons))
    import torch_tensorrt

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
    accepted = inspect.signature(torch_tensorrt.dynamo.compile).parameters
    options = compile_options(spec.precision, dtype, accepted)
    details: dict[str, Any] = {}
    if spec.precision == "int8":
        from modelopt.torch.quantization.utils import export_torch_mode

        exported, details = quantized_program(ctx)
        scope = export_torch_mode  # ModelOpt's quantizers trace only inside it
    else:
        exported, scope = ctx.exported(spec.precision), contextlib.nullcontext
    with torch.no_grad(), scope():
        module = torch_tensorrt.dynamo.compile(exported, inputs=inputs, **options)
        torch_tensorrt.save(
            module,
            str(path),
            output_format="exported_program",
            arg_inputs=[ctx.example(dtype)],
            dynamic_shapes=({0: ctx.batch_dim()},),
            retrace=True,
        )
    return {
        "torch_tensorrt": torch_tensorrt.__version__,
        "compile_options": sorted(options),
        **details,
    }


def compile_options(precision: str, dtype: torch.dtype, accepted) -> dict[str, Any]:
    """``torch_tensorrt.dynamo.compile`` options for ``precision``, for the parameters this
    release ``accepted``. FP32/FP16: current releases take the precision from the model's
    own dtype with explicit typing (``enabled_precisions`` is deprecated there; older
    releases only know it). INT8: ``enabled_precisions={torch.int8}``, as torch-tensorrt's
    quantization guide shows for ModelOpt's QDQ graphs."""
    options: dict[str, Any] = {"min_block_size": 1}
    if precision == "int8" and "enabled_precisions" in accepted:
        options["enabled_precisions"] = {torch.int8}
    elif "use_explicit_typing" in accepted:
        options["use_explicit_typing"] = True
    else:
        options["enabled_precisions"] = {dtype}
    if precision == "fp32" and "disable_tf32" in accepted:
        options["disable_tf32"] = True  # FP32 means FP32: held to the FP32 parity limit
    return options
