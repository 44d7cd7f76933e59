"""Benchmark every variant at every batch size; report, plot, log, and gate the registry.

    python -m steps.benchmark --model MODEL_URI --optimized OPT_URI --dataset DATASET_URI
        --output REPORT_URI [--mlflow-run-id ID] [--outputs-dir DIR] [--config F]
        [--set k=v ...] [--debug]

Variants: eager FP32, on a GPU eager FP16/BF16 channels_last, and every variant that
``steps.optimize`` built (one it skipped or that cannot run here is listed with the reason).
Per batch size: p50/p90/p99 latency, images/s, peak memory (``steps.benchmark.timing``);
per variant: test-set accuracy. Writes ``benchmark.json``, ``report.md`` and ``benchmark.png`` under
REPORT_URI (``benchmark.json`` last), and into the outputs dir ``report.md``,
``benchmark.json``, ``previous-version`` (the version that held the alias before this run,
"" if none), ``promoted`` (true/false), ``model-version`` (the registered version, "" if
none), ``serving-image`` and ``previous-serving-image`` (the images that serve them: the
deploy's and the rollback's) and ``summary.json`` (seconds, best_variant, promoted). With MLflow on,
registers the model and moves the alias only if it passes the gate
(``steps.benchmark.champion``), then logs the numbers as a table (``benchmark/table.json``),
a few ``bench/...`` headline metrics, the run's description and the files.

The report is a ``steps.benchmark.results.BenchmarkReport``; ``variants.json`` is read
once, here, and handed to whoever needs it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from steps.benchmark.mlflow_run import log_to_mlflow
from steps.benchmark.report import markdown, plot_png
from steps.benchmark.results import BenchmarkReport, Measured, NotMeasured, Timing, fastest_by_batch
from steps.benchmark.timing import memory_probe, summarize, time_calls
from steps.common.config import ConfigError, PipelineConfig, load_config
from steps.common.device import device_name, environment, pick_device
from steps.common.optimized_variants import (
    load_variants,
    open_optimized,
)
from steps.common.per_image import pack_correct
from steps.common.step_cli import (
    add_common,
    run_main,
    step_seconds,
    tracking_wanted,
    write_outputs,
)
from steps.common.storage import open_store
from steps.common.trained_model import (
    DTYPES,
    InputError,
    load_test_split,
    load_trained,
    normalize,
    run_batched,
)

TIMING_FIELDS = (
    "batch_sizes",
    "warmup_iters",
    "warmup_s",
    "min_iters",
    "max_iters",
    "time_budget_s",
    "rounds",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.benchmark", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", required=True, help="MODEL_URI written by steps.train")
    parser.add_argument("--optimized", required=True, help="OPT_URI written by steps.optimize")
    parser.add_argument("--dataset", required=True, help="DATASET_URI (its test split)")
    parser.add_argument("--output", required=True, help="REPORT_URI to write the report under")
    add_common(parser)
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    cfg = load_config(args.config, args.overrides)
    device = pick_device()
    trained = load_trained(args.model, cfg.storage, device)
    variants = open_optimized(args.optimized, trained, cfg.storage)  # variants.json, once
    gate = _gate_batch(cfg, variants)
    split = load_test_split(args.dataset, cfg.storage)
    store = open_store(args.output, cfg.storage)
    tracked = None
    if tracking_wanted(cfg, args.mlflow_run_id):  # before the long part: fail early
        from steps.common.pipeline_run import open_run

        tracked = open_run(cfg.tracking, args.mlflow_run_id, run_name="benchmark")
    succeeded = False
    try:
        report = build_report(cfg, trained, variants, split, args.optimized, device, gate)
        if tracked:
            from steps.benchmark.champion import promote

            promotion = promote(cfg, trained, report, variants, tracked.run_id, split.images[:4])
            report = replace(report, promotion=promotion)
        files = {"report.md": markdown(report).encode(), "benchmark.png": plot_png(report)}
        files["benchmark.json"] = json.dumps(report.document(), indent=2).encode()
        store.delete("benchmark.json")  # never a new report.md beside an old benchmark.json
        for name, data in files.items():  # benchmark.json last: it publishes the report
            store.write_bytes(name, data)
        if tracked:
            log_to_mlflow(report, files, store.root)
        succeeded = True
    finally:
        if tracked:
            tracked.finish(succeeded)
    promotion = report.promotion
    summary = {
        **step_seconds(start),
        "best_variant": report.best_variant,
        "promoted": promotion.promoted,
        "report_uri": store.root,
        "device": report.device_name,
    }
    outputs = {name: files[name].decode() for name in ("report.md", "benchmark.json")}
    # The champion before this run ("" if none): what a failed live check rolls back to.
    outputs["previous-version"] = promotion.previous_version
    # What the deploy task reads: whether the alias moved, and to which registry version.
    outputs["promoted"] = "true" if promotion.promoted else "false"
    outputs["model-version"] = promotion.version
    # The images that serve it and the version before (cifar-optimize for a torch champion).
    outputs["serving-image"] = promotion.serving_image
    outputs["previous-serving-image"] = promotion.previous_serving_image
    write_outputs(args.outputs_dir, {**outputs, "summary.json": summary})
    print(store.root)
    return {**summary, "report": report}


def _gate_batch(cfg: PipelineConfig, variants: dict[str, Any]) -> int:
    bench, low, high = cfg.benchmark, variants["batch_range"]["min"], variants["batch_range"]["max"]
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


def collect(cfg, trained, variants, opt_uri: str, device, workdir: Path):
    """``{name: (precision, runner, prepare)}`` to measure, and ``{name: NotMeasured}`` not to."""
    runners: dict[str, tuple[str, Any, Any]] = {"eager": ("fp32", trained.model, lambda x: x)}
    if device.type == "cuda":
        half = cfg.optimize.gpu_precision
        dtype = DTYPES[half]
        model = copy.deepcopy(trained.model).to(dtype=dtype, memory_format=torch.channels_last)
        prepare = lambda x: x.to(dtype).contiguous(memory_format=torch.channels_last)  # noqa: E731
        runners[f"eager_{half}"] = (half, model, prepare)
    skipped: dict[str, NotMeasured] = {}
    for variant in load_variants(opt_uri, variants, cfg.storage, device, workdir):
        if variant.runner is None:
            skipped[variant.name] = NotMeasured(variant.status, variant.reason)
            continue
        precision = variant.entry["precision"]
        dtype = DTYPES[precision]
        runners[variant.name] = (precision, variant.runner, lambda x, dtype=dtype: x.to(dtype))
    return runners, skipped


def measure_all(
    cfg, runners, images: torch.Tensor, labels: torch.Tensor, max_batch, min_batch
) -> dict[str, Measured]:
    """Accuracy and per-batch timings of every runner; ``images`` normalised, on device.
    Per batch size the variants take turns, ``benchmark.rounds`` times, each round with a
    share of the iterations and time budget (see ``steps.benchmark.timing``)."""
    bench = cfg.benchmark
    rounds = bench.rounds
    probe = memory_probe(images.device)
    correct: dict[str, torch.Tensor] = {}
    for name, (_, runner, prepare) in runners.items():
        logits = run_batched(runner, prepare(images), max_batch, min_batch)
        correct[name] = logits.argmax(1).cpu() == labels
    cells: dict[str, dict[int, dict[str, float]]] = {name: {} for name in runners}
    for batch in bench.batch_sizes:
        index = torch.arange(batch) % len(images)
        inputs = {name: prepare(images[index]) for name, (_, _, prepare) in runners.items()}
        times: dict[str, list[float]] = {name: [] for name in runners}
        peaks = dict.fromkeys(runners, 0.0)
        for turn in range(rounds):
            for name, (_, runner, _) in runners.items():
                probe.start()
                times[name] += time_calls(
                    runner,
                    inputs[name],
                    warmup=bench.warmup_iters if turn == 0 else 1,
                    warmup_s=bench.warmup_s if turn == 0 else 0.0,
                    min_iters=-(-bench.min_iters // rounds),
                    max_iters=-(-bench.max_iters // rounds),
                    budget_s=bench.time_budget_s / rounds,
                )
                peaks[name] = max(peaks[name], probe.peak_mb())
        for name in runners:
            cell = cells[name][batch] = summarize(times[name], batch, peaks[name])
            print(
                f"  {name:<14} bs {batch:<4} p50 {cell['p50_ms']:9.3f} ms  "
                f"{cell['images_per_s']:10,.0f} images/s",
                file=sys.stderr,
            )
    eager = cells["eager"]
    return {
        name: Measured(
            precision=precision,
            accuracy=correct[name].float().mean().item(),
            correct=pack_correct(correct[name].numpy()),  # the live check's subsets
            batches={
                b: Timing(**cell, speedup_vs_eager=eager[b]["p50_ms"] / cell["p50_ms"])
                for b, cell in cells[name].items()
            },
        )
        for name, (precision, _, _) in runners.items()
    }


def build_report(cfg, trained, variants, split, opt_uri: str, device, gate: int) -> BenchmarkReport:
    """Load every variant of ``variants`` (variants.json), measure it, and report."""
    count = cfg.benchmark.accuracy_samples or len(split.labels)
    images = normalize(split.images[:count].to(device), trained.mean, trained.std)
    labels = split.labels[:count]
    load = [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None
    print(f"Benchmarking on {device_name(device)}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="benchmark-") as tmp:
        runners, skipped = collect(cfg, trained, variants, opt_uri, device, Path(tmp))
        low, high = variants["batch_range"]["min"], variants["batch_range"]["max"]
        measured = measure_all(cfg, runners, images, labels, high, low)
    # the table predict's and the served model's dispatcher follow; the best at the gate
    fastest = fastest_by_batch(measured, cfg.benchmark.accuracy_margin)
    return BenchmarkReport(
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model_uri=trained.uri,
        architecture=trained.meta["architecture"],
        optimized_uri=variants["optimized_uri"],
        dataset_uri=split.uri,
        dataset_digest=split.digest,
        test_images=len(labels),
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main("benchmark", run, args, user_errors=(InputError,))
