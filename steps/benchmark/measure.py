"""What the benchmark measures: eager (and on a GPU eager in half precision), and every
variant ``steps.optimize`` built, each run first in a child process (``probe``) and only
then loaded here; then accuracy and latency per batch size, the variants taking turns."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import torch

from steps.benchmark.probe import FirstRun, first_run
from steps.benchmark.timing import memory_probe, summarize, time_calls
from steps.common.config import PipelineConfig
from steps.common.contracts.benchmark import Measured, NotMeasured, Timing
from steps.common.contracts.variants import VariantsManifest
from steps.common.isolation import ChildFailed, Worker
from steps.common.optimized_variants import (
    VariantUnavailable,
    check_runs_here,
    fetch_variant,
    load_variant_file,
)
from steps.common.per_image import pack_correct
from steps.common.trained_model import DTYPES, TrainedModel, run_batched

FIRST_RUN = "first load and run"  # what a failed probe's reason starts with


def collect(
    cfg: PipelineConfig,
    trained: TrainedModel,
    variants: VariantsManifest,
    opt_uri: str,
    device: torch.device,
    workdir: Path,
) -> tuple[dict[str, tuple[str, Any, Any]], dict[str, NotMeasured]]:
    """``{name: (precision, runner, prepare)}`` to measure, and ``{name: NotMeasured}`` not
    to. Each built variant is fetched, run in a child process at every batch size the
    benchmark uses (within ``benchmark.load_timeout_s``), then loaded here."""
    runners: dict[str, tuple[str, Any, Any]] = {"eager": ("fp32", trained.model, lambda x: x)}
    if device.type == "cuda":
        half = cfg.optimize.gpu_precision
        dtype = DTYPES[half]
        model = copy.deepcopy(trained.model).to(dtype=dtype, memory_format=torch.channels_last)
        prepare = lambda x: x.to(dtype).contiguous(memory_format=torch.channels_last)  # noqa: E731
        runners[f"eager_{half}"] = (half, model, prepare)
    low, high = variants.batch_range.min, variants.batch_range.max
    batches = tuple(sorted({low, high, *cfg.benchmark.batch_sizes}))
    skipped: dict[str, NotMeasured] = {}
    scratch = workdir / "first-runs"
    scratch.mkdir(exist_ok=True)
    with Worker(None, scratch, name="first-run") as worker:
        for name, entry in variants.variants.items():
            if not entry.built:
                skipped[name] = NotMeasured(entry.status, entry.reason)
                continue
            try:
                check_runs_here(entry, device)
                path = fetch_variant(opt_uri, entry, cfg.storage, workdir)
                job = FirstRun(entry, str(path), str(device), batches)
                why = worker.run(first_run, job, cfg.benchmark.load_timeout_s, FIRST_RUN)
                if why:
                    raise VariantUnavailable(why)
                runner = load_variant_file(entry, path, device)
            except VariantUnavailable as exc:
                skipped[name] = NotMeasured("unavailable", str(exc))
                continue
            except ChildFailed as exc:
                skipped[name] = NotMeasured("failed", exc.failure.message, exc.failure)
                print(f"  {name:<14} failed: {exc.failure.message}", file=sys.stderr)
                continue
            dtype = DTYPES[entry.precision]
            runners[name] = (entry.precision, runner, lambda x, dtype=dtype: x.to(dtype))
    return runners, skipped


def measure_all(
    cfg: PipelineConfig, runners, images: torch.Tensor, labels: torch.Tensor, max_batch, min_batch
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
