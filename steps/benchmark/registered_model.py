"""The model a registry version holds, logged to MLflow, reloaded once and checked: the
serving pyfunc, whatever variant it runs.

Its input is the same whatever runs it: uint8 ``N x 32 x 32 x 3`` RGB, as staged (the
signature, ``/invocations`` and the Open Inference Protocol's ``UINT8 [N, 32, 32, 3]``).
``steps/common/serving/classifier.py`` (models-from-code) with ``runners.py``,
``torch_runners.py`` and ``strict_input.py`` as its ``code_paths``, the variants' files,
and the dispatcher table: per measured batch size the variant measured fastest within the
accuracy margin (``served_fastest``), among

- the portable variants (ONNX Runtime / OpenVINO, FP32 or INT8) where any was measured:
  ``mlflow models serve`` needs neither torch nor this package, and the ``cifar-serve``
  image (no torch) serves it;
- else every measured variant, eager included (eager, TorchScript, torch.export,
  AOTInductor, TensorRT): the pyfunc runs them through torch (``torch_runners``), and the
  image that built them, ``cifar-optimize`` (the same torch, torch-tensorrt and CUDA: an
  AOTInductor package or a TensorRT engine loads only there), serves it
  (``SERVED_BY``; the version's ``serving_image`` tag). Eager ships as its weights and a
  copy of ``steps/common/models.py``.

Reloaded through MLflow, it must classify a few test images as the trained model does.
"""

from __future__ import annotations

import io
import shutil
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import mlflow
import numpy as np
import torch
from mlflow.exceptions import MlflowException
from mlflow.models import infer_signature

from steps.benchmark.results import fastest_by_batch
from steps.common import models, serving
from steps.common.config import StorageConfig
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.variants import VariantsManifest
from steps.common.optimized_variants import PORTABLE_KINDS, fetch_variant
from steps.common.serving.runners import TORCH_KINDS
from steps.common.serving.serving_manifest import (
    ServedBatchRange,
    ServedVariant,
    ServingManifest,
)
from steps.common.trained_model import TrainedModel, normalize

LOGGED_NAME = "classifier"
SERVING = Path(serving.__file__).resolve().parent
CLASSIFIER = SERVING / "classifier.py"
# what classifier.py imports (torch_runners only where a torch variant is served)
CODE_PATHS = [
    SERVING / "runners.py",
    SERVING / "torch_runners.py",
    SERVING / "strict_input.py",
    SERVING / "serving_manifest.py",
]
EAGER = "eager"  # the benchmark's eager FP32; on a GPU also eager_fp16 / eager_bf16
EAGER_WEIGHTS, EAGER_NETWORK = "eager.pt", "eager_network.py"
# The image that serves a champion, by what its variants need: "serve" (cifar-serve, no
# torch) for portable ones only, "optimize" (cifar-optimize, which built them) for any
# torch variant (ImagesConfig.image names them).
SERVED_BY = {"portable": "serve", "torch": "optimize"}


class RegistryError(RuntimeError):
    """The model could not be registered, reloaded, or its alias moved."""


def portable_fastest(
    report: BenchmarkReport, variants: VariantsManifest, margin: float
) -> dict[int, str]:
    """Per measured batch size, the fastest portable variant within ``margin`` of eager's
    accuracy; empty where none was measured (runtimes not installed, or all failed)."""
    portable = tuple(
        name for name, entry in variants.variants.items() if entry.kind in PORTABLE_KINDS
    )
    return fastest_by_batch(report.measured, margin, among=portable)


def served_fastest(
    report: BenchmarkReport, variants: VariantsManifest, margin: float
) -> dict[int, str]:
    """The served dispatcher table: the fastest portable variants where any was measured
    within ``margin`` (a champion the torch-free image serves), else the fastest of every
    measured variant, eager included (never empty: eager is within its own margin)."""
    return portable_fastest(report, variants, margin) or fastest_by_batch(report.measured, margin)


def runtime(variants: VariantsManifest, fastest: dict[int, str]) -> str:
    """``torch`` where the table runs a torch variant (eager included), else ``portable``:
    which image serves it (``SERVED_BY``)."""
    kinds = {_kind(variants, name) for name in fastest.values()}
    return "torch" if kinds & set(TORCH_KINDS) else "portable"


def _kind(variants: VariantsManifest, name: str) -> str:
    return EAGER if _is_eager(name) else variants.variants[name].kind


def _is_eager(name: str) -> bool:
    return name == EAGER or name.startswith(f"{EAGER}_")


def log_served_model(
    trained: TrainedModel,
    variants: VariantsManifest,
    fastest: dict[int, str],
    storage: StorageConfig,
    images: torch.Tensor,
    registered_name: str,
):
    """Log (and register) the serving pyfunc running ``fastest`` of ``variants``
    (variants.json; eager, ``eager_fp16`` or ``eager_bf16`` from ``trained``); reload it
    once through MLflow and check it classifies ``images`` (uint8 NCHW) as the trained
    model does. MLflow's ModelInfo back."""
    pixels = images.permute(0, 2, 3, 1).contiguous().numpy()  # NHWC uint8, as served
    try:
        info = _log_pyfunc(trained, variants, fastest, storage, pixels, registered_name)
        got = mlflow.pyfunc.load_model(info.model_uri).predict(pixels)
    except MlflowException as exc:
        raise RegistryError(
            f"cannot log or reload the model as {registered_name!r}: {exc.message}"
        ) from None
    device = next(trained.model.parameters()).device
    x = normalize(images.to(device), trained.mean, trained.std)
    with torch.inference_mode():
        expected = trained.model(x).argmax(1).tolist()
    if got["class"].tolist() != expected:
        raise RegistryError(f"{info.model_uri} reloads but classifies differently from the model")
    return info


def _requirements(kinds: set[str]) -> list[str]:
    """Pins of what the served model imports: torch (and torch-tensorrt) only where it runs
    a torch variant (``mlflow models serve --env-manager virtualenv`` installs these)."""
    wanted = ["mlflow", "numpy", "pandas", "onnxruntime", "openvino"]
    if kinds & set(TORCH_KINDS):
        wanted.append("torch")
    if "tensorrt" in kinds:
        wanted.append("torch-tensorrt")
    pins = []
    for package in wanted:
        try:
            pins.append(f"{package}=={version(package).split('+')[0]}")
        except PackageNotFoundError:
            continue
    return pins


def _served_variant(
    trained: TrainedModel,
    variants: VariantsManifest,
    name: str,
    storage: StorageConfig,
    folder: Path,
) -> ServedVariant:
    """One served variant's ``serving.json`` entry, its files fetched into ``folder``: a
    built variant of variants.json, or eager written here from ``trained``."""
    if _is_eager(name):
        return _eager_variant(trained, name, folder)
    entry = variants.variants[name]
    fetch_variant(variants.optimized_uri, entry, storage, folder)
    details = dict(entry.details)
    if entry.kind in TORCH_KINDS:  # it runs where it was built (torch_runners)
        details["device"] = entry.device or "cpu"
    return ServedVariant(
        kind=entry.kind,
        file=entry.file,
        precision=entry.precision,
        files=entry.files,
        details=details,
    )


def _eager_variant(trained: TrainedModel, name: str, folder: Path) -> ServedVariant:
    """The trained network as the benchmark ran it (``eager``: FP32; ``eager_fp16`` /
    ``eager_bf16``: that precision, channels_last, on the GPU): its weights and a copy of
    the network's definition, rebuilt by ``torch_runners`` without this package."""
    precision = "fp32" if name == EAGER else name.removeprefix(f"{EAGER}_")
    state = {k: v.detach().cpu() for k, v in trained.model.state_dict().items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    (folder / EAGER_WEIGHTS).write_bytes(buffer.getvalue())
    shutil.copyfile(models.__file__, folder / EAGER_NETWORK)
    meta = trained.meta
    return ServedVariant(
        kind=EAGER,
        file=EAGER_WEIGHTS,
        precision=precision,
        files=[EAGER_WEIGHTS, EAGER_NETWORK],
        details={
            "network": EAGER_NETWORK,
            "architecture": meta["architecture"],
            "num_classes": int(meta["num_classes"]),
            "width": int(meta.get("width", 64)),
            "device": next(trained.model.parameters()).device.type,
            "channels_last": precision != "fp32",
        },
    )


def _log_pyfunc(
    trained: TrainedModel,
    variants: VariantsManifest,
    fastest: dict[int, str],
    storage: StorageConfig,
    example: np.ndarray,
    registered_name: str,
):
    """The pyfunc's folder (the variants' files and ``serving.json``), logged and
    registered; its signature from running ``classifier.py`` on ``example`` here."""
    with tempfile.TemporaryDirectory(prefix="serving-") as tmp:
        folder = Path(tmp) / "variants"
        folder.mkdir()
        files = {
            name: _served_variant(trained, variants, name, storage, folder)
            for name in sorted(set(fastest.values()))
        }
        span = variants.batch_range  # what the export/AOTI/TensorRT programs take
        meta = ServingManifest(
            classes=[str(c) for c in trained.classes],
            mean=list(trained.mean),
            std=list(trained.std),
            threads=max(int(v.details.get("threads") or 1) for v in files.values()),
            batch_range=ServedBatchRange(min=span.min, max=span.max),
            runtime=runtime(variants, fastest),
            variants=files,
            fastest_by_batch=dict(fastest),
        )
        (folder / ServingManifest.DOCUMENT).write_text(meta.to_json())
        # Executing classifier.py (signature check, example) needs runners importable.
        sys.path.insert(0, str(SERVING))
        try:
            local = mlflow.pyfunc.PythonModelContext({"variants": str(folder)}, {})
            import classifier  # the very file the served model executes

            model = classifier.CifarClassifier()
            model.load_context(local)
            signature = infer_signature(example, model.predict(local, example))
            return mlflow.pyfunc.log_model(
                name=LOGGED_NAME,
                python_model=str(CLASSIFIER),
                artifacts={"variants": str(folder)},
                code_paths=[str(p) for p in CODE_PATHS],
                signature=signature,
                input_example=example,
                registered_model_name=registered_name,
                pip_requirements=_requirements({v.kind for v in files.values()}),
            )
        finally:
            sys.path.remove(str(SERVING))
