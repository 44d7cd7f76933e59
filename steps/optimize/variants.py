"""The variants a trained model is optimized into, and what their builders share: the
specs per device, the build context (the model exported once per precision) and timing.
Builders: ``steps.optimize.builders`` (``tensorrt_builder``, ``portable``); the parity gate:
``steps.optimize.gate``.

| variant | file | made by | precision |
| --- | --- | --- | --- |
| torchscript | torchscript.pt | trace, freeze, optimize_for_inference if faster | fp32 |
| export | export.pt2 | ``torch.export``, dynamic batch dimension | fp32 |
| aoti | aoti.pt2 | AOTInductor package of the exported program | fp32; GPU fp16/bf16 |
| aoti_bf16 | aoti_bf16.pt2 | the same in BF16, CPUs with AMX / AVX512-BF16 only | bf16 |
| tensorrt_fp32/16 | tensorrt_*.ep | torch-tensorrt dynamo path, exported program | fp32, fp16 |
| tensorrt_int8 | tensorrt_int8.ep | ModelOpt INT8 PTQ (QDQ), then the same compile | int8 |
| onnx | model.onnx | ``torch.onnx.export(dynamo=True)``, run in ONNX Runtime | fp32 |
| onnx_int8 | model_int8.onnx | ORT ``quantize_static``: QDQ, per-channel weights | int8 |
| onnx_cuda / onnx_tensorrt | model.onnx | ORT's CUDA / TensorRT execution providers (CUDA) | fp32 |
| openvino | openvino.xml/.bin | ``openvino.convert_model`` of the ONNX file, CPU plugin | fp32 |
| openvino_int8 | openvino_int8.xml/.bin | NNCF ``nncf.quantize`` of that IR | int8 |

The INT8 variants calibrate on ``calibration_samples`` training images and ship only with
top-1 agreement >= ``int8_min_agreement`` against eager FP32 (``steps.optimize.gate``).

TorchScript is built because the seed articles ask for it, although upstream now
deprecates it in favour of ``torch.export``. Every file reloads without the training code.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.fx.experimental.optimization import fuse

from steps.common.config import OptimizeConfig
from steps.common.trained_model import DTYPES, Runner

KINDS = ("torchscript", "export", "aoti", "tensorrt", "onnx", "openvino")
NAMES = (
    "torchscript",
    "export",
    "aoti",
    "aoti_bf16",
    "tensorrt_fp32",
    "tensorrt_fp16",
    "tensorrt_int8",
    "onnx",
    "onnx_int8",
    "onnx_cuda",
    "onnx_tensorrt",
    "openvino",
    "openvino_int8",
)


class SkipVariant(RuntimeError):
    """The variant cannot be built here (no CUDA, no torch-tensorrt); the message says why."""


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str
    precision: str
    file: str
    provider: str = ""  # ONNX Runtime execution provider of an onnx variant ("": CPU)
    builder: str = ""  # an extra variant's own builder, module:function ("": its kind's)


# An extra variant's file when its config names none: <name> and its kind's suffix.
SUFFIXES = {
    "torchscript": ".pt",
    "export": ".pt2",
    "aoti": ".pt2",
    "tensorrt": ".ep",
    "onnx": ".onnx",
    "openvino": ".xml",
}


@dataclass
class BuildContext:
    model: nn.Module  # eager FP32, eval mode, on ``device``
    device: torch.device
    cfg: OptimizeConfig
    workdir: Path
    # Normalised training images INT8 calibrates on (NCHW float32, CPU).
    calibration: torch.Tensor | None = None
    _exported: dict[str, torch.export.ExportedProgram] = field(default_factory=dict)
    batchnorm_folded: bool = False

    @property
    def threads(self) -> int:
        return self.cfg.cpu_threads or torch.get_num_threads()

    def example(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        # Batch 2 or more: torch.export specialises sizes 0 and 1.
        batch = max(2, min(self.cfg.opt_batch, self.cfg.max_batch))
        return torch.randn(batch, 3, 32, 32, device=self.device).to(dtype)

    def calibration_batches(self, batch: int = 32) -> list[torch.Tensor]:
        """The normalised training images every INT8 builder calibrates on, in order, in
        batches of ``batch`` (the last one shorter)."""
        if self.calibration is None or len(self.calibration) == 0:
            raise RuntimeError("INT8 calibration needs training images; none were loaded")
        return list(self.calibration.split(batch))

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

    def int8(specs: list[Spec]) -> list[Spec]:
        return specs if cfg.int8 else []

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
            *int8([Spec("tensorrt_int8", "tensorrt", "int8", "tensorrt_int8.ep")]),
        ],
        # The ONNX file comes first: OpenVINO converts it, the CUDA providers run it.
        "onnx": [
            Spec("onnx", "onnx", "fp32", "model.onnx"),
            *int8([Spec("onnx_int8", "onnx", "int8", "model_int8.onnx")]),
            Spec("onnx_cuda", "onnx", "fp32", "model.onnx", "CUDAExecutionProvider"),
            Spec("onnx_tensorrt", "onnx", "fp32", "model.onnx", "TensorrtExecutionProvider"),
        ],
        "openvino": [
            Spec("openvino", "openvino", "fp32", "openvino.xml"),
            *int8([Spec("openvino_int8", "openvino", "int8", "openvino_int8.xml")]),
        ],
    }
    extra = [
        Spec(
            e.name, e.kind, e.precision, e.file or f"{e.name}{SUFFIXES[e.kind]}", builder=e.builder
        )
        for e in cfg.extra_variants
    ]
    return [spec for kind in kinds for spec in table[kind]] + extra


def median_ms(fn: Runner, x: torch.Tensor, iters: int = 5) -> float:
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
