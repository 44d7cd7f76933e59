"""Benchmark every variant at every batch size; report, plot, log, and gate the registry.

    python -m steps.benchmark --model MODEL_URI --optimized OPT_URI --dataset DATASET_URI
        --output REPORT_URI [--mlflow-run-id ID] [--outputs-dir DIR] [--config F]
        [--set k=v ...] [--debug]

Variants: eager FP32, on a GPU eager FP16/BF16 channels_last, and every variant that
``steps.optimize`` built (one it skipped or that cannot run here is listed with the
reason). Each is first loaded and run in a child process (``steps.benchmark.probe``): one
that crashes or hangs there is listed as failed, not measured. Per batch size: p50/p90/p99
latency, images/s, peak memory (``steps.benchmark.timing``); per variant: test-set
accuracy. Writes ``benchmark.json`` (``steps.common.contracts.benchmark``), ``report.md``
and ``benchmark.png`` under REPORT_URI (``benchmark.json`` last), and into the outputs dir
``report.md``, ``benchmark.json``, ``previous-version`` (the version that held the alias
before this run, "" if none), ``promoted`` (true/false), ``model-version`` (the registered
version, "" if none), ``serving-image`` and ``previous-serving-image`` (the images that
serve them: the deploy's and the rollback's) and ``summary.json`` (seconds, best_variant,
promoted). With MLflow
on, registers the model and moves the alias only if it passes the gate
(``steps.benchmark.champion``), then logs the numbers as a table (``benchmark/table.json``),
a few ``bench/...`` headline metrics, the run's description and the files.

The work is ``steps.benchmark.benchmark_model``; ``variants.json`` is read once, there,
and handed to whoever needs it.
"""

from __future__ import annotations

import argparse

from steps.benchmark.benchmark_model import BenchmarkResult, benchmark_model
from steps.common.config import load_config
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.step_cli import add_common, run_main, write_outputs
from steps.common.trained_model import InputError


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


def run(args: argparse.Namespace) -> BenchmarkResult:
    cfg = load_config(args.config, args.overrides)
    result = benchmark_model(
        cfg, args.model, args.optimized, args.dataset, args.output, args.mlflow_run_id
    )
    promotion = result.report.promotion
    published = ("report.md", BenchmarkReport.DOCUMENT)
    outputs = {name: result.files[name].decode() for name in published}
    # The champion before this run ("" if none): what a failed live check rolls back to.
    outputs["previous-version"] = promotion.previous_version
    # What the deploy task reads: whether the alias moved, and to which registry version.
    outputs["promoted"] = "true" if promotion.promoted else "false"
    outputs["model-version"] = promotion.version
    # The images that serve it and the version before (cifar-optimize for a torch champion).
    outputs["serving-image"] = promotion.serving_image
    outputs["previous-serving-image"] = promotion.previous_serving_image
    write_outputs(args.outputs_dir, {**outputs, "summary.json": result.summary()})
    print(result.report_uri)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main("benchmark", run, args, user_errors=(InputError,))
