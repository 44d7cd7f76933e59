"""ONNX Runtime and OpenVINO runners and the per-batch-size dispatcher.

Self-contained on purpose: numpy, onnxruntime and openvino only (each imported when
used), no torch and no ``steps`` imports, so ``mlflow models serve`` loads it from the
pyfunc's ``code_paths`` alone. Runners take float32 ``N x 3 x 32 x 32`` already normalised
(the variants' input contract) and return float32 logits ``N x classes``; given ``pixels``
(the training mean and std), ``load_runner`` returns one that takes the served uint8
``N x 32 x 32 x 3`` images instead, OpenVINO's with the normalisation compiled into its
graph. A torch variant (``TORCH_KINDS``) is loaded by ``torch_runners`` beside this file,
imported only then: torch is needed only where the served model runs one.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ArrayRunner = Callable[[np.ndarray], np.ndarray]
# The training mean and std per channel: a runner given them takes uint8 RGB pixels.
Pixels = tuple[Sequence[float], Sequence[float]]
PORTABLE_KINDS = ("onnx", "openvino")
TORCH_KINDS = ("eager", "torchscript", "export", "aoti", "tensorrt")  # torch_runners'


class RuntimeMissing(ImportError):
    """The variant's runtime (onnxruntime, openvino) is not installed."""


def ort_session(path: Path, threads: int, providers: Sequence[str] = ("CPUExecutionProvider",)):
    """An ONNX Runtime session with every graph optimisation on and ``threads`` intra-op."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeMissing(
            "onnxruntime is not installed (pip install 'cifar-pipeline[onnx]')"
        ) from None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=list(providers))


class OrtRunner:
    def __init__(self, path: Path, threads: int, providers: Sequence[str] = ()) -> None:
        self.session = ort_session(path, threads, providers or ("CPUExecutionProvider",))
        self.input = self.session.get_inputs()[0].name

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: np.ascontiguousarray(x, np.float32)})[0]


def openvino_core():
    try:
        import openvino as ov
    except ImportError:
        raise RuntimeMissing(
            "openvino is not installed (pip install 'cifar-pipeline[openvino]')"
        ) from None
    return ov, ov.Core()


def openvino_config(hint: str, threads: int) -> dict[str, Any]:
    """FP32 kept as FP32: without the precision hint a BF16-capable CPU silently runs BF16."""
    return {
        "PERFORMANCE_HINT": hint,
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": threads,
    }


class OpenVinoRunner:
    """One IR compiled twice for the CPU plugin: the LATENCY hint (one stream, all threads)
    for batches below ``throughput_batch``, the THROUGHPUT hint (several streams) at and
    above it, where the batch is split across the streams' requests. One call at a time:
    the infer request and the queue's callback are shared, and ``mlflow models serve``
    calls ``predict`` from several threads at once (``asyncio.to_thread`` per request);
    without the lock concurrent requests fail or mix their outputs.

    With ``pixels`` the compiled model takes uint8 ``N x H x W x C`` images and does the
    conversion, ``(x / 255 - mean) / std`` and the transpose itself (OpenVINO's
    PrePostProcessor), inside the graph and its threads: the caller's thread then runs no
    numpy pass over the batch, which in a server is a pass that waits for the GIL."""

    def __init__(
        self, xml: Path, threads: int, throughput_batch: int, pixels: Pixels | None = None
    ) -> None:
        ov, core = openvino_core()
        model = core.read_model(str(xml))
        self.dtype = np.float32
        if pixels is not None:
            model = pixel_input(ov, model, *pixels)
            self.dtype = np.uint8
        self.latency = core.compile_model(model, "CPU", openvino_config("LATENCY", threads))
        self.request = self.latency.create_infer_request()
        self.throughput_batch = throughput_batch
        self.throughput = core.compile_model(model, "CPU", openvino_config("THROUGHPUT", threads))
        streams = self.throughput.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
        self.queue = ov.AsyncInferQueue(self.throughput, max(1, int(streams)))
        self.streams = len(self.queue)
        self.lock = threading.Lock()

    def __call__(self, x: np.ndarray) -> np.ndarray:
        with self.lock:
            return self._infer(np.ascontiguousarray(x, self.dtype))

    def _infer(self, x: np.ndarray) -> np.ndarray:
        if len(x) < self.throughput_batch or self.streams == 1:
            return self.request.infer([x], share_inputs=True)[0].copy()
        chunks = np.array_split(x, self.streams)
        outputs: list[np.ndarray | None] = [None] * len(chunks)

        def done(request, index: int) -> None:
            outputs[index] = request.get_output_tensor(0).data.copy()

        self.queue.set_callback(done)
        for index, chunk in enumerate(chunks):
            self.queue.start_async([chunk], index)
        self.queue.wait_all()
        return np.concatenate(outputs)


def pixel_input(ov: Any, model: Any, mean: Sequence[float], std: Sequence[float]) -> Any:
    """``model`` (float32 NCHW, normalised) with a uint8 NHWC input that it converts,
    scales by 1/255, normalises per channel and transposes itself."""
    from openvino.preprocess import PrePostProcessor

    steps = PrePostProcessor(model)
    steps.input().tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC"))
    steps.input().model().set_layout(ov.Layout("NCHW"))  # the transpose follows from the two
    preprocess = steps.input().preprocess().convert_element_type(ov.Type.f32)
    preprocess.scale(255.0).mean([float(m) for m in mean]).scale([float(s) for s in std])
    return steps.build()


def load_runner(
    kind: str,
    path: Path,
    details: dict[str, Any],
    threads: int,
    pixels: Pixels | None = None,
    precision: str = "fp32",
    batch_range: tuple[int, int] = (1, 1 << 30),
) -> ArrayRunner:
    """A portable variant's file (``kind`` onnx or openvino) as a numpy callable; with
    ``pixels`` (mean, std) it takes uint8 ``N x 32 x 32 x 3`` images, not normalised floats.
    A torch variant (``TORCH_KINDS``) needs ``pixels``: it is served only so, by
    ``torch_runners.TorchRunner`` in ``precision`` within ``batch_range`` (min, max)."""
    if kind in TORCH_KINDS:
        if pixels is None:
            raise ValueError(f"a {kind} variant is served from uint8 pixels: pass pixels")
        return _torch_runners().TorchRunner(kind, path, details, precision, pixels, batch_range)
    if kind == "onnx":
        ort = OrtRunner(path, threads, details.get("providers", ()))
        if pixels is None:
            return ort
        return lambda images: ort(normalise_uint8(images, *pixels))
    if kind == "openvino":
        return OpenVinoRunner(path, threads, int(details.get("throughput_batch", 64)), pixels)
    raise ValueError(
        f"unknown variant kind {kind!r}; expected one of {PORTABLE_KINDS + TORCH_KINDS}"
    )


def _torch_runners() -> Any:
    """``torch_runners``, beside this file: a module of the ``steps`` package here, a
    top-level one of the pyfunc's ``code_paths`` where MLflow loads the served model.
    RuntimeMissing where torch is not installed (the cifar-serve image has none)."""
    try:
        if __package__:
            from . import torch_runners
        else:
            import torch_runners
    except ImportError as exc:
        if exc.name != "torch" and not str(exc.name or "").startswith("torch."):
            raise
        raise RuntimeMissing(
            "torch is not installed: this champion runs a torch variant, which the "
            "cifar-optimize image serves (the one that built it), not cifar-serve"
        ) from None
    return torch_runners


class Dispatcher:
    """Runs each batch on the variant measured fastest at the nearest measured batch size
    at or below it (the smallest measured one below that range)."""

    def __init__(self, runners: dict[str, ArrayRunner], fastest: dict[int, str]) -> None:
        if not fastest:
            raise ValueError("the dispatcher needs at least one measured batch size")
        missing = sorted(set(fastest.values()) - set(runners))
        if missing:
            raise ValueError(f"dispatcher: no runner for {', '.join(missing)}")
        self.runners = runners
        self.batches = sorted(fastest)
        self.fastest = {int(b): name for b, name in fastest.items()}

    def choose(self, batch: int) -> str:
        index = max(0, bisect.bisect_right(self.batches, batch) - 1)
        return self.fastest[self.batches[index]]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.runners[self.choose(len(x))](x)


def normalise_uint8(images: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """uint8 ``N x 32 x 32 x 3`` RGB -> float32 ``N x 3 x 32 x 32``, ``(x / 255 - mean) / std``."""
    x = images.astype(np.float32).transpose(0, 3, 1, 2)
    mean_a = np.asarray(mean, np.float32).reshape(1, 3, 1, 1)
    std_a = np.asarray(std, np.float32).reshape(1, 3, 1, 1)
    return np.ascontiguousarray((x / 255.0 - mean_a) / std_a, np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)
