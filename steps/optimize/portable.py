"""The builders of the portable variants: ONNX (run in ONNX Runtime, on the CPU or through
its CUDA / TensorRT execution providers), OpenVINO IR for the CPU plugin, and their INT8
post-training static quantizations, calibrated on training images. Each raises
SkipVariant, naming the package, where its runtime is not installed.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from steps.optimize.variants import BuildContext, SkipVariant, Spec

ONNX_FILE = "model.onnx"


def _need(*modules: str, extra: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise SkipVariant(
            f"{', '.join(missing)} not installed (pip install 'cifar-pipeline[{extra}]')"
        )


def export_onnx(ctx: BuildContext) -> Path:
    """The eager FP32 model as ONNX (dynamo exporter, dynamic batch), exported once per
    build into the work dir; OpenVINO and quantization start from this file."""
    path = ctx.workdir / ONNX_FILE
    if not path.exists():
        _need("onnx", "onnxscript", extra="onnx")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("torch.onnx").setLevel(logging.WARNING)
            program = torch.onnx.export(
                ctx.model,
                (ctx.example(),),
                dynamo=True,
                dynamic_shapes=({0: ctx.batch_dim()},),
                input_names=["images"],
                output_names=["logits"],
                verbose=False,
            )
            program.save(str(path), external_data=False)
    return path


def calibration_batches(ctx: BuildContext, batch: int = 32) -> list[np.ndarray]:
    return [c.cpu().numpy() for c in ctx.calibration_batches(batch)]


def build_onnx(spec: Spec, ctx: BuildContext, path: Path) -> dict[str, Any]:
    _need("onnxruntime", extra="onnx")
    import onnxruntime as ort

    details: dict[str, Any] = {"onnxruntime": ort.__version__, "threads": ctx.threads}
    if spec.provider:
        if ctx.device.type != "cuda":
            raise SkipVariant(f"{spec.provider} needs CUDA; this machine has no GPU")
        if spec.provider not in ort.get_available_providers():
            raise SkipVariant(f"this onnxruntime has no {spec.provider} (install onnxruntime-gpu)")
        details["providers"] = [spec.provider, "CPUExecutionProvider"]
    if spec.precision == "int8":
        details.update(_quantize_onnx(ctx, path))
    elif path != export_onnx(ctx):
        raise RuntimeError(f"{spec.name}: expected the ONNX file at {path}")
    return details


def _quantize_onnx(ctx: BuildContext, path: Path) -> dict[str, Any]:
    """Static QDQ quantization: uint8 activations (MinMax calibrated), per-channel int8
    weights, the U8S8 pairing ONNX Runtime recommends on x86 with VNNI."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    source = export_onnx(ctx)
    prepared = ctx.workdir / "model_int8_prep.onnx"
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    batches = calibration_batches(ctx)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"images": b} for b in batches])

        def get_next(self):
            return next(self.items, None)

    quantize_static(
        str(prepared),
        str(path),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    return {"calibration_images": sum(len(b) for b in batches), "format": "QDQ"}


def build_openvino(spec: Spec, ctx: BuildContext, path: Path) -> dict[str, Any]:
    """FP32 IR converted from the ONNX file, weights kept FP32 (``save_model`` compresses
    to FP16 by default); INT8 quantized from it by NNCF."""
    if ctx.device.type != "cpu":
        raise SkipVariant("OpenVINO variants target the CPU plugin; this run uses the GPU")
    _need("openvino", extra="openvino")
    if spec.precision == "int8":
        _need("nncf", extra="openvino")
    import openvino as ov

    model = ov.convert_model(str(export_onnx(ctx)))
    details: dict[str, Any] = {
        "openvino": ov.get_version(),
        "threads": ctx.threads,
        "throughput_batch": ctx.cfg.openvino_throughput_batch,
        "files": [path.name, path.with_suffix(".bin").name],
    }
    if spec.precision == "int8":
        import nncf

        batches = calibration_batches(ctx, batch=1)
        model = nncf.quantize(
            model,
            nncf.Dataset(batches),
            preset=nncf.QuantizationPreset.PERFORMANCE,
            subset_size=len(batches),
        )
        details["calibration_images"] = len(batches)
    ov.save_model(model, str(path), compress_to_fp16=False)
    return details
