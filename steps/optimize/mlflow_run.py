"""The optimize step in the pipeline's MLflow run: each built file as an artifact with its
numbers, each failed variant's reason as a tag, ``variants.json``, the environment; each
built file reloaded once from MLflow."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from steps.common.contracts.variants import VariantsManifest
from steps.common.optimized_variants import VARIANTS_FILE, load_variant_file
from steps.common.trained_model import DTYPES


def log_to_mlflow(
    manifest: VariantsManifest, workdir: Path, x: torch.Tensor, device, min_batch: int
) -> None:
    """Each built file as an artifact with its numbers; reloaded once from MLflow and run
    on ``x[:min_batch]``. A variant that failed is tagged ``optimize.failed.<name>`` with
    its reason (a crash's signal and frame, a limit)."""
    import mlflow

    metrics: dict[str, float] = {}
    tags = {f"optimize.env.{k}": str(v) for k, v in manifest.environment.items()}
    for name, entry in manifest.variants.items():
        metrics[f"optimize/{name}/built"] = float(entry.built)
        if entry.parity is not None:
            metrics[f"optimize/{name}/max_abs_diff"] = entry.parity.max_abs_diff
            metrics[f"optimize/{name}/top1_agreement"] = entry.parity.top1_agreement
        if entry.built:
            metrics[f"optimize/{name}/size_mb"] = (entry.size_bytes or 0) / 2**20
            metrics[f"optimize/{name}/build_s"] = entry.build_seconds or 0.0
            for file in entry.files:
                mlflow.log_artifact(str(workdir / file), artifact_path="optimized")
        elif entry.status == "failed":
            tags[f"optimize.failed.{name}"] = entry.reason[:5000]
    mlflow.log_metrics(metrics, step=0)
    mlflow.log_dict(manifest.document(), f"optimized/{VARIANTS_FILE}")
    mlflow.set_tags({**tags, "optimize.optimized_uri": manifest.optimized_uri})
    run_id = mlflow.active_run().info.run_id
    with tempfile.TemporaryDirectory(prefix="reload-") as tmp:
        for name, entry in manifest.built().items():
            local = {
                file: mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=f"optimized/{file}", dst_path=tmp
                )
                for file in entry.files
            }
            runner = load_variant_file(entry, Path(local[entry.file]), device)
            with torch.inference_mode():
                runner(x[:min_batch].to(DTYPES[entry.precision]))
            print(f"  {name}: reloaded from MLflow", file=sys.stderr)
