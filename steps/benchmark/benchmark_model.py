"""The benchmark step's work: ``variants.json`` read once (its contract), every variant
measured (``steps.benchmark.measure``), the report (``results``); with MLflow on, the
registry gate (``champion``) and the run's record (``mlflow_run``); then ``report.md``,
``benchmark.png`` and ``benchmark.json`` (last: it publishes the report) under the
report URI."""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from steps.benchmark.measure import collect, measure_all
from steps.benchmark.mlflow_run import log_to_mlflow
from steps.benchmark.report import markdown, plot_png
from steps.benchmark.results import build_report, load_average
from steps.common.config import ConfigError, PipelineConfig
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.variants import VariantsManifest
from steps.common.device import device_name, pick_device
from steps.common.optimized_variants import open_optimized
from steps.common.step_cli import step_seconds, tracking_wanted
from steps.common.storage import open_store
from steps.common.trained_model import load_test_split, load_trained, normalize

REPORT_FILES = ("report.md", "benchmark.png", BenchmarkReport.DOCUMENT)  # the last publishes


@dataclass(frozen=True)
class BenchmarkResult:
    """The report as published, where, the files' bytes, and how long it took."""

    report: BenchmarkReport
    report_uri: str
    files: dict[str, bytes]
    seconds: float
    startup_seconds: float | None = None

    @property
    def promoted(self) -> bool:
        return self.report.promotion.promoted

    def summary(self) -> dict[str, Any]:
        """``summary.json``."""
        return {
            "seconds": self.seconds,
            "startup_seconds": self.startup_seconds,
            "best_variant": self.report.best_variant,
            "promoted": self.promoted,
            "report_uri": self.report_uri,
            "device": self.report.device_name,
        }


def gate_batch(cfg: PipelineConfig, variants: VariantsManifest) -> int:
    """The batch whose p50 the latency gate compares; every timed batch inside the
    variants' dynamic range."""
    bench, low, high = cfg.benchmark, variants.batch_range.min, variants.batch_range.max
    outside = [b for b in bench.batch_sizes if not low <= b <= high]
    if outside:
        raise ConfigError(
            f"benchmark.batch_sizes: {outside} outside the variants' batch range {low}..{high}; "
            "choose sizes inside it or re-optimize with a wider optimize.min_batch/max_batch"
        )
    gate = bench.gate_batch or max(bench.batch_sizes)
    if gate not in bench.batch_sizes:
        raise ConfigError(f"benchmark.gate_batch: {gate} is not one of benchmark.batch_sizes")
    return gate


def benchmark_model(
    cfg: PipelineConfig,
    model_uri: str,
    opt_uri: str,
    dataset_uri: str,
    output: str,
    run_id: str | None,
) -> BenchmarkResult:
    start = time.perf_counter()
    device = pick_device()
    trained = load_trained(model_uri, cfg.storage, device)
    variants = open_optimized(opt_uri, trained, cfg.storage)  # variants.json, once
    gate = gate_batch(cfg, variants)
    split = load_test_split(dataset_uri, cfg.storage)
    store = open_store(output, cfg.storage)
    tracked = None
    if tracking_wanted(cfg, run_id):  # before the long part: fail early
        from steps.common.pipeline_run import open_run

        tracked = open_run(cfg.tracking, run_id, run_name="benchmark")
    succeeded = False
    try:
        count = cfg.benchmark.accuracy_samples or len(split.labels)
        images = normalize(split.images[:count].to(device), trained.mean, trained.std)
        labels = split.labels[:count]
        load = load_average()
        print(f"Benchmarking on {device_name(device)}", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="benchmark-") as tmp:
            runners, skipped = collect(cfg, trained, variants, opt_uri, device, Path(tmp))
            low, high = variants.batch_range.min, variants.batch_range.max
            measured = measure_all(cfg, runners, images, labels, high, low)
        report = build_report(
            cfg, trained, variants, split, device, gate, measured, skipped, len(labels), load
        )
        if tracked:
            from steps.benchmark.champion import promote

            promotion = promote(cfg, trained, report, variants, tracked.run_id, split.images[:4])
            report = replace(report, promotion=promotion)
        files = {"report.md": markdown(report).encode(), "benchmark.png": plot_png(report)}
        files[BenchmarkReport.DOCUMENT] = report.dumps()
        store.delete(BenchmarkReport.DOCUMENT)  # never a new report.md beside an old one
        for name in REPORT_FILES:
            store.write_bytes(name, files[name])
        if tracked:
            log_to_mlflow(report, files, store.root)
        succeeded = True
    finally:
        if tracked:
            tracked.finish(succeeded)
    return BenchmarkResult(report, store.root, files, **step_seconds(start))
