"""The model a registry version holds, logged to MLflow, reloaded once and checked.

- The serving pyfunc, where a portable variant was measured within the accuracy margin:
  the portable variants (ONNX Runtime / OpenVINO, FP32 or INT8) the benchmark measured
  fastest per batch size, the dispatcher table, and ``steps/common/serving/classifier.py``
  (models-from-code) with ``runners.py`` and ``strict_input.py`` as its ``code_paths``, so
  ``mlflow models serve`` needs neither torch nor this package. Reloaded through MLflow,
  it must classify as the trained model does.
- Else the FP32 model in torch.export format (it reloads without this code), which must
  predict as the model in memory does.
"""

from __future__ import annotations

import copy
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import mlflow
import numpy as np
import torch
from mlflow.exceptions import MlflowException
from mlflow.models import infer_signature
from mlflow.models.signature import ModelSignature
from mlflow.types import Schema, TensorSpec

from steps.benchmark.results import fastest_by_batch
from steps.common import serving
from steps.common.config import StorageConfig
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.variants import VariantsManifest
from steps.common.optimized_variants import PORTABLE_KINDS, fetch_variant
from steps.common.serving.serving_manifest import ServedVariant, ServingManifest
from steps.common.trained_model import TrainedModel, normalize

LOGGED_NAME = "classifier"
SERVING = Path(serving.__file__).resolve().parent
CLASSIFIER = SERVING / "classifier.py"
# what classifier.py imports
CODE_PATHS = [SERVING / "runners.py", SERVING / "strict_input.py", SERVING / "serving_manifest.py"]


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


def log_exported_model(trained: TrainedModel, images: torch.Tensor, registered_name: str):
    """Log the FP32 model in torch.export format, registered under ``registered_name``;
    reload it once and check that it predicts as the model in memory does. ``images``:
    uint8 NCHW test images; MLflow's ModelInfo back."""
    model = copy.deepcopy(trained.model).to("cpu").eval()
    x = normalize(images[:2].cpu(), trained.mean, trained.std).contiguous()
    shape = (-1, *trained.meta["input_shape"])
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), shape)]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, len(trained.classes)))]),
    )
    try:
        info = mlflow.pytorch.log_model(
            model,
            name=LOGGED_NAME,
            registered_model_name=registered_name,
            signature=signature,
            input_example=x.numpy(),
            serialization_format="pt2",
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"],
            step=0,
        )
        reloaded = mlflow.pytorch.load_model(info.model_uri)
    except MlflowException as exc:
        raise RegistryError(
            f"cannot log or reload the model as {registered_name!r}: {exc.message}"
        ) from None
    with torch.inference_mode():
        expected, got = model(x), reloaded(x)
    if not torch.allclose(expected, got, atol=1e-4):
        raise RegistryError(f"{info.model_uri} reloads but predicts differently from the model")
    return info


def log_served_model(
    trained: TrainedModel,
    variants: VariantsManifest,
    fastest: dict[int, str],
    storage: StorageConfig,
    images: torch.Tensor,
    registered_name: str,
):
    """Log (and register) the serving pyfunc running ``fastest`` of ``variants``
    (variants.json); reload it once through MLflow and check it classifies ``images``
    (uint8 NCHW) as the trained model does. MLflow's ModelInfo back."""
    pixels = images.permute(0, 2, 3, 1).contiguous().numpy()  # NHWC uint8, as served
    try:
        info = _log_pyfunc(trained, variants, fastest, storage, pixels, registered_name)
        got = mlflow.pyfunc.load_model(info.model_uri).predict(pixels)
    except MlflowException as exc:
        raise RegistryError(
            f"cannot log or reload the model as {registered_name!r}: {exc.message}"
        ) from None
    x = normalize(images.cpu(), trained.mean, trained.std)
    with torch.inference_mode():
        expected = trained.model.cpu()(x).argmax(1).tolist()
    if got["class"].tolist() != expected:
        raise RegistryError(f"{info.model_uri} reloads but classifies differently from the model")
    return info


def _requirements() -> list[str]:
    wanted = ["mlflow", "numpy", "pandas", "onnxruntime", "openvino"]
    pins = []
    for package in wanted:
        try:
            pins.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            continue
    return pins


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
    opt_uri = variants.optimized_uri
    with tempfile.TemporaryDirectory(prefix="serving-") as tmp:
        folder = Path(tmp) / "variants"
        folder.mkdir()
        files = {}
        for name in sorted(set(fastest.values())):
            entry = variants.variants[name]
            fetch_variant(opt_uri, entry, storage, folder)
            files[name] = ServedVariant(
                kind=entry.kind,
                file=entry.file,
                precision=entry.precision,
                files=entry.files,
                details=entry.details,
            )
        meta = ServingManifest(
            classes=[str(c) for c in trained.classes],
            mean=list(trained.mean),
            std=list(trained.std),
            threads=max(int(v.details.get("threads") or 1) for v in files.values()),
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
                pip_requirements=_requirements(),
            )
        finally:
            sys.path.remove(str(SERVING))
