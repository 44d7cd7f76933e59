"""What the benchmark found, as its report (``steps.common.contracts.benchmark``): the
fastest variant per batch size, and the report built from the measurements."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import torch

from steps.benchmark.timing import memory_probe
from steps.common.config import PipelineConfig
from steps.common.contracts.benchmark import BenchmarkReport, Measured, NotMeasured
from steps.common.contracts.variants import VariantsManifest
from steps.common.device import device_name, environment
from steps.common.trained_model import TestSplit, TrainedModel

TIMING_FIELDS = (
    "batch_sizes",
    "warmup_iters",
    "warmup_s",
    "min_iters",
    "max_iters",
    "time_budget_s",
    "rounds",
)


def fastest_by_batch(
    measured: dict[str, Measured], margin: float, among: tuple[str, ...] | None = None
) -> dict[int, str]:
    """Per batch size, the variant with the lowest p50 among those within ``margin`` of
    eager's accuracy (and named in ``among``, if given); empty where none is."""
    floor = measured["eager"].accuracy - margin
    eligible = [
        name
        for name, variant in measured.items()
        if variant.accuracy >= floor and (among is None or name in among)
    ]
    if not eligible:
        return {}
    return {
        batch: min(eligible, key=lambda n, b=batch: measured[n].batches[b].p50_ms)
        for batch in measured["eager"].batches
    }


def load_average() -> list[float] | None:
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None


def build_report(
    cfg: PipelineConfig,
    trained: TrainedModel,
    variants: VariantsManifest,
    split: TestSplit,
    device: torch.device,
    gate: int,
    measured: dict[str, Measured],
    skipped: dict[str, NotMeasured],
    test_images: int,
    load: list[float] | None,
) -> BenchmarkReport:
    """The report of ``measured`` on ``test_images`` (and why ``skipped`` were not): the
    table predict's and the served model's dispatcher follow, the best variant at the
    ``gate`` batch (eager is always within the margin of itself)."""
    fastest = fastest_by_batch(measured, cfg.benchmark.accuracy_margin)
    return BenchmarkReport(
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model_uri=trained.uri,
        architecture=trained.meta["architecture"],
        optimized_uri=variants.optimized_uri,
        dataset_uri=split.uri,
        dataset_digest=split.digest,
        test_images=test_images,
        device=device.type,
        device_name=device_name(device),
        environment=environment(device),
        load_average=load,
        settings={
            **cfg.benchmark.model_dump(mode="json", include=set(TIMING_FIELDS)),
            "clock": "CUDA events, synchronised" if device.type == "cuda" else "perf_counter",
            "memory_method": memory_probe(device).method,
        },
        variants={**measured, **skipped},
        gate_batch=gate,
        best_variant=fastest[gate],
        fastest_by_batch=fastest,
        slower_than_eager=sorted(
            n
            for n, v in measured.items()
            if any(t.speedup_vs_eager < 1 for t in v.batches.values())
        ),
    )
