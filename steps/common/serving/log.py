"""Log the champion candidate as an MLflow pyfunc that serves: the portable variants the
benchmark measured fastest per batch size (ONNX Runtime / OpenVINO, FP32 or INT8), the
dispatcher table, and ``classifier.py`` (models-from-code) with ``runners.py`` and
``strict_input.py`` as its ``code_paths``, so ``mlflow models serve`` needs neither torch
nor this package.
"""

from __future__ import annotations

import json
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from steps.common.config import StorageConfig
from steps.common.optimized_variants import PORTABLE_KINDS, fetch_variant, variant_files

HERE = Path(__file__).resolve().parent
CLASSIFIER = HERE / "classifier.py"
CODE_PATHS = [HERE / "runners.py", HERE / "strict_input.py"]  # what classifier.py imports


def portable_fastest(report: dict[str, Any], doc: dict[str, Any], margin: float) -> dict[str, str]:
    """Per measured batch size, the fastest portable variant within ``margin`` of eager's
    accuracy; empty where none was measured (runtimes not installed, or all failed)."""
    floor = report["variants"]["eager"]["accuracy"] - margin
    eligible = {
        name: v
        for name, v in report["variants"].items()
        if v["status"] == "measured"
        and doc["variants"].get(name, {}).get("kind") in PORTABLE_KINDS
        and v["accuracy"] >= floor
    }
    if not eligible:
        return {}
    batches = report["variants"]["eager"]["batches"]
    return {
        b: min(eligible, key=lambda n, b=b: eligible[n]["batches"][b]["p50_ms"]) for b in batches
    }


def _requirements() -> list[str]:
    wanted = ["mlflow", "numpy", "pandas", "onnxruntime", "openvino"]
    pins = []
    for package in wanted:
        try:
            pins.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            continue
    return pins


def log_served_model(
    fastest: dict[str, str],
    doc: dict[str, Any],
    opt_uri: str,
    storage: StorageConfig,
    meta: dict[str, Any],
    registered_name: str,
    logged_name: str,
    example: np.ndarray,
):
    """Log (and register) the pyfunc; returns MLflow's ModelInfo. ``example``: uint8 NHWC."""
    import mlflow
    from mlflow.models import infer_signature

    with tempfile.TemporaryDirectory(prefix="serving-") as tmp:
        folder = Path(tmp) / "variants"
        folder.mkdir()
        variants = {}
        for name in sorted(set(fastest.values())):
            entry = doc["variants"][name]
            fetch_variant(opt_uri, entry, storage, folder)
            variants[name] = {
                "kind": entry["kind"],
                "file": entry["file"],
                "precision": entry["precision"],
                "files": variant_files(entry),
                "details": entry.get("details", {}),
            }
        serving = {
            "classes": meta["classes"],
            "mean": meta["mean"],
            "std": meta["std"],
            "threads": max(int(v["details"].get("threads") or 1) for v in variants.values()),
            "variants": variants,
            "fastest_by_batch": fastest,
        }
        (folder / "serving.json").write_text(json.dumps(serving, indent=2))
        # Executing classifier.py (signature check, example) needs runners importable.
        sys.path.insert(0, str(HERE))
        try:
            local = mlflow.pyfunc.PythonModelContext({"variants": str(folder)}, {})
            import classifier  # the very file the served model executes

            model = classifier.CifarClassifier()
            model.load_context(local)
            output = model.predict(local, example)
            signature = infer_signature(example, output)
            info = mlflow.pyfunc.log_model(
                name=logged_name,
                python_model=str(CLASSIFIER),
                artifacts={"variants": str(folder)},
                code_paths=[str(p) for p in CODE_PATHS],
                signature=signature,
                input_example=example,
                registered_model_name=registered_name,
                pip_requirements=_requirements(),
            )
        finally:
            sys.path.remove(str(HERE))
    return info, output
