"""Runners of the torch variants (eager, TorchScript, torch.export, AOTInductor, TensorRT)
for the served pyfunc: uint8 ``N x 32 x 32 x 3`` RGB pixels in, float32 logits out.

Self-contained (torch and numpy, no ``steps`` imports): the pyfunc ships it by
``code_paths`` beside ``runners.py``, which imports it only for a torch variant, so a
champion of portable variants still loads without torch. Each runner moves the pixels to
its device as they are (a quarter of the bytes of float32), and there converts, transposes
and normalises them with the trainer's own arithmetic (``normalise``: one fused
multiply-add, as ``steps.common.trained_model.normalize``, which a test holds it equal to,
bit for bit), then casts to the variant's precision. A batch outside the variant's dynamic
range (``batch_range``: export, AOTInductor and TensorRT programs take no other) runs in
chunks of at most its ``max``, a short one padded up to its ``min``.

A variant built for CUDA (TensorRT, AOTInductor and torch.export programs compiled or
exported there, eager and TorchScript measured there) runs on CUDA only: on a server
without a GPU it fails to load, naming why, rather than run elsewhere than it was measured.
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

TORCH_KINDS = ("eager", "torchscript", "export", "aoti", "tensorrt")
DTYPES = {"fp32": torch.float32, "int8": torch.float32, "fp16": torch.float16}
DTYPES["bf16"] = torch.bfloat16
# The programs of an AOTInductor package (steps.optimize builds them; "model" is the one
# ``aoti_load_package`` loads): batches up to details.small_batch.max_batch run the first.
SMALL_BATCH_PROGRAM, LARGE_BATCH_PROGRAM = "small_batch", "model"


class DeviceMissing(RuntimeError):
    """The variant was built for CUDA and this process has no GPU."""


def normalise(pixels: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 ``N x 32 x 32 x 3`` RGB (on any device) -> float32 ``N x 3 x 32 x 32``,
    ``(x / 255 - mean) / std`` computed as the trainer computes it: ``x * (1 / (255 std))
    + (-mean / std)`` in one ``addcmul``."""
    device = pixels.device
    std_t = torch.tensor(std, device=device).view(1, 3, 1, 1)
    mean_t = torch.tensor(mean, device=device).view(1, 3, 1, 1)
    # NCHW in memory first (uint8: a quarter of the bytes), so the float pass runs on the
    # layout the trainer's does and rounds as it does.
    nchw = pixels.permute(0, 3, 1, 2).contiguous().float()
    return torch.addcmul(-mean_t / std_t, nchw, 1.0 / (255.0 * std_t))


def variant_device(details: dict[str, Any]) -> torch.device:
    """Where the variant runs: where it was built (``details["device"]``, default CPU)."""
    if details.get("device", "cpu") != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceMissing(
            "built for CUDA and this server has no GPU: serve it where one is "
            "(serving.gpus), or promote a CPU variant"
        )
    return torch.device("cuda")


def load_module(kind: str, path: Path, details: dict[str, Any], device: torch.device) -> Callable:
    """The variant's file as a torch callable on ``device`` (float NCHW in, logits out)."""
    if kind == "eager":
        return _eager(path, details, device)
    if kind == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TorchScript is deprecated upstream; we know
            module = torch.jit.load(str(path), map_location=device)
            if details.get("optimize_for_inference"):
                module = torch.jit.optimize_for_inference(module)
        return module
    if kind == "export":
        return torch.export.load(str(path)).module()
    if kind == "aoti":
        small = int(details.get("small_batch", {}).get("max_batch", 0))
        if not small:
            return torch._inductor.aoti_load_package(str(path))
        from torch._inductor.package import load_package

        small_program = load_package(str(path), SMALL_BATCH_PROGRAM)
        large_program = load_package(str(path), LARGE_BATCH_PROGRAM)
        return lambda x: (small_program if len(x) <= small else large_program)(x)
    if kind == "tensorrt":
        try:
            import torch_tensorrt
        except ImportError:
            raise ImportError(
                "torch-tensorrt is not installed: a TensorRT champion is served by the "
                "image that built it (cifar-optimize)"
            ) from None

        if details.get("int8"):
            # ModelOpt registers its quantize ops; needed only where one stayed in PyTorch.
            with contextlib.suppress(ImportError):
                import modelopt.torch.quantization  # noqa: F401
        return torch_tensorrt.load(str(path)).module()
    raise ValueError(f"unknown torch variant kind {kind!r}; expected one of {TORCH_KINDS}")


def _eager(path: Path, details: dict[str, Any], device: torch.device) -> torch.nn.Module:
    """The trained network itself: its definition (``details["network"]``, a copy of
    ``steps/common/models.py`` beside the weights) rebuilt and its state dict loaded."""
    source = path.parent / details["network"]
    spec = importlib.util.spec_from_file_location(f"cifar_network_{source.stem}", source)
    if spec is None or spec.loader is None:
        raise ValueError(f"{source}: not a Python file")
    network = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(network)
    model = network.build_model(
        details["architecture"], int(details["num_classes"]), int(details.get("width", 64))
    )
    model.load_state_dict(torch.load(str(path), map_location="cpu", weights_only=True))
    model = model.to(device, DTYPES[details.get("precision", "fp32")]).eval()
    if details.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    return model


class TorchRunner:
    """A torch variant behind the numpy runner interface of ``runners.py``: uint8 NHWC
    pixels in, float32 logits ``N x classes`` out, normalised and cast on its device."""

    def __init__(
        self,
        kind: str,
        path: Path,
        details: dict[str, Any],
        precision: str,
        pixels: tuple[Sequence[float], Sequence[float]],
        batch_range: tuple[int, int] = (1, 1 << 30),
    ) -> None:
        self.device = variant_device(details)
        self.dtype = DTYPES[precision]
        self.channels_last = bool(details.get("channels_last"))
        self.mean, self.std = (tuple(float(v) for v in p) for p in pixels)
        self.min_batch, self.max_batch = batch_range
        wanted = {**details, "precision": precision, "int8": precision == "int8"}
        self.module = load_module(kind, path, wanted, self.device)

    def __call__(self, images: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            pixels = torch.from_numpy(np.ascontiguousarray(images, np.uint8))
            x = normalise(pixels.to(self.device, non_blocking=True), self.mean, self.std)
            fmt = torch.channels_last if self.channels_last else torch.contiguous_format
            x = x.to(self.dtype).contiguous(memory_format=fmt)
            outputs = []
            for chunk in x.split(self.max_batch):
                n = len(chunk)
                if n < self.min_batch:  # a program of a fixed smallest batch: pad, drop
                    pad = chunk[:1].expand(self.min_batch - n, *chunk.shape[1:])
                    chunk = torch.cat([chunk, pad]).contiguous(memory_format=fmt)
                outputs.append(self.module(chunk)[:n].float())
            return torch.cat(outputs).cpu().numpy()
