"""The optimize step's work: the trained model into every configured variant, each built
and gated in a build process (``steps.optimize.isolated``), the built files uploaded,
``variants.json`` published last (``steps.optimize.manifest``); with MLflow on, logged
into the pipeline's run (``steps.optimize.mlflow_run``). A rerun with the same weights and
settings reuses what is there."""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steps.common.config import PipelineConfig
from steps.common.contracts.variants import VariantsManifest
from steps.common.device import pick_device
from steps.common.optimized_variants import VARIANTS_FILE
from steps.common.step_cli import step_seconds, tracking_wanted
from steps.common.storage import open_store
from steps.common.trained_model import (
    load_calibration_images,
    load_test_split,
    load_trained,
    normalize,
    run_batched,
)
from steps.optimize.isolated import build_variants, build_worker
from steps.optimize.manifest import check_config, manifest, reusable, settings


class OptimizeError(RuntimeError):
    """A required variant could not be built or failed its gate."""


@dataclass(frozen=True)
class OptimizeResult:
    """What the step made (``manifest``: variants.json as published) and how long it took."""

    manifest: VariantsManifest
    reused: bool
    seconds: float
    startup_seconds: float | None = None

    @property
    def optimized_uri(self) -> str:
        return self.manifest.optimized_uri

    def summary(self) -> dict[str, Any]:
        """``summary.json``: the times, where, and each variant's outcome in a line."""
        return {
            "seconds": self.seconds,
            "startup_seconds": self.startup_seconds,
            "optimized_uri": self.optimized_uri,
            "device": self.manifest.device,
            "reused": self.reused,
            "variants": {
                name: {
                    "status": e.status,
                    "precision": e.precision,
                    "size_bytes": e.size_bytes,
                    "reason": e.reason or None,
                    "max_abs_diff": e.parity.max_abs_diff if e.parity else None,
                    "top1_agreement": e.parity.top1_agreement if e.parity else None,
                    "failure": e.failure.cause if e.failure else None,
                }
                for name, e in self.manifest.variants.items()
            },
        }


def optimize_model(
    cfg: PipelineConfig, model_uri: str, dataset_uri: str, output: str, run_id: str | None
) -> OptimizeResult:
    start = time.perf_counter()
    check_config(cfg)
    device = pick_device()
    trained = load_trained(model_uri, cfg.storage, device)
    split = load_test_split(dataset_uri, cfg.storage)
    store = open_store(output, cfg.storage)
    found = reusable(store, trained, settings(cfg, device))
    if found is not None:
        print(f"Already optimized: {store.root} (same weights and settings)", file=sys.stderr)
        return OptimizeResult(found, reused=True, **step_seconds(start))

    with (
        tempfile.TemporaryDirectory(prefix="optimize-") as tmp,
        build_worker(cfg.optimize, Path(tmp)) as worker,
    ):
        worker.start()  # its imports overlap the loading below and MLflow's connection
        made = _build_and_publish(cfg, trained, split, device, store, run_id, worker, Path(tmp))
    return OptimizeResult(made, reused=False, **step_seconds(start))


def _calibration(cfg: PipelineConfig, dataset_uri: str, trained, device):
    """The normalised training images INT8 calibrates on, where an INT8 variant is built."""
    opt = cfg.optimize
    int8_kinds = {"onnx", "openvino"} | ({"tensorrt"} if device.type == "cuda" else set())
    if not (opt.int8 and int8_kinds & set(opt.variants)):
        return None
    pixels = load_calibration_images(dataset_uri, cfg.storage, opt.calibration_samples)
    return normalize(pixels, trained.mean, trained.std)


def _build_and_publish(cfg, trained, split, device, store, run_id, worker, tmp: Path):
    """Every variant built (``worker``), the files uploaded and logged; ``variants.json``
    published last, unless a required variant failed (OptimizeError)."""
    tracked = None
    if tracking_wanted(cfg, run_id):
        from steps.common.pipeline_run import open_run

        tracked = open_run(cfg.tracking, run_id, run_name="optimize")
    succeeded = False
    try:
        print(f"Optimizing {trained.meta['architecture']} on {device.type}", file=sys.stderr)
        workdir = tmp / "variants"
        workdir.mkdir()
        opt = cfg.optimize
        samples = max(opt.parity_samples, opt.int8_parity_samples if opt.int8 else 0)
        x = normalize(split.images[:samples].to(device), trained.mean, trained.std)
        reference = run_batched(trained.model, x, opt.max_batch)
        calibration = _calibration(cfg, split.uri, trained, device)
        entries = build_variants(opt, trained, x, reference, calibration, workdir, worker)
        made = manifest(cfg, store.root, trained, split, device, entries)
        # An older manifest must not point at files this run replaces: drop it first.
        store.delete(VARIANTS_FILE)
        for name in sorted({f for e in made.built().values() for f in e.files}):
            store.upload_file(workdir / name, name)
        if tracked:
            from steps.optimize.mlflow_run import log_to_mlflow

            log_to_mlflow(made, workdir, x[:8], device, opt.min_batch)
        failures = [e.reason for e in made.failed().values() if not e.optional]
        if failures:
            raise OptimizeError("; ".join(failures))
        # The manifest publishes the variants: written only after every file is in place.
        store.write_bytes(VARIANTS_FILE, made.dumps())
        succeeded = True
    finally:
        if tracked:
            tracked.finish(succeeded)
    return made
