"""The benchmark in its MLflow run: the numbers as one table (``benchmark/table.json``),
a few ``bench/...`` headline metrics, the run's description (``mlflow.note.content``:
accuracy, best variant and its latency, links) and the report files as artifacts, so the
run's "Model metrics" tab does not open on a chart per number."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from steps.common.contracts.benchmark import BenchmarkReport

STATS = ("p50_ms", "p90_ms", "p99_ms", "images_per_s", "peak_mem_mb")


def table_rows(report: BenchmarkReport) -> list[dict[str, Any]]:
    """One row per measured variant and batch size: the table MLflow shows."""
    return [
        {
            "variant": name,
            "precision": variant.precision,
            "batch": batch,
            **{stat: getattr(cell, stat) for stat in (*STATS, "speedup_vs_eager")},
            "accuracy": variant.accuracy,
            "fastest_at_batch": report.fastest_by_batch.get(batch) == name,
        }
        for name, variant in report.measured.items()
        for batch, cell in variant.batches.items()
    ]


def headline(report: BenchmarkReport) -> dict[str, float]:
    """The few numbers a person looks for first; the rest is in the table."""
    cell = report.best_at_gate
    return {
        "bench/accuracy": report.measured["eager"].accuracy,
        "bench/best/accuracy": report.best.accuracy,
        "bench/best/p50_ms": cell.p50_ms,
        "bench/best/images_per_s": cell.images_per_s,
        "bench/best/speedup_vs_eager": cell.speedup_vs_eager,
    }


def description(report: BenchmarkReport, report_uri: str) -> str:
    """The run's description (``mlflow.note.content``): accuracy, best variant, links."""
    best, cell = report.best, report.best_at_gate
    fastest = ", ".join(f"{b}: {n}" for b, n in report.fastest_by_batch.items())
    promotion = report.promotion
    lines = [
        f"**Test accuracy** {report.measured['eager'].accuracy:.4f} "
        f"({report.architecture}, {report.test_images} test images)",
        "",
        f"**Best variant** {report.best_variant} ({best.precision}): p50 "
        f"{cell.p50_ms:.3f} ms at batch {report.gate_batch}, {cell.images_per_s:,.0f} images/s, "
        f"{cell.speedup_vs_eager:.2f}x eager, on {report.device_name}",
        "",
        f"**Fastest per batch size** {fastest}",
        "",
        f"**Registry** {promotion.verdict()}",
        "",
        f"- report: `{report_uri}` (also the `benchmark/` artifacts of this run)",
        f"- optimized variants: `{report.optimized_uri}`",
        f"- model: `{report.model_uri}`",
    ]
    if promotion.version:
        lines.append(f"- registered: `models:/{promotion.registered_model}/{promotion.version}`")
    return "\n".join(lines)


def log_to_mlflow(report: BenchmarkReport, files: dict[str, bytes], report_uri: str) -> None:
    """The numbers as one table (``bench/table``), a few headline metrics, the run's
    description, and the three files as artifacts: not a chart per number."""
    import mlflow
    import pandas as pd

    mlflow.log_metrics(headline(report), step=0)
    mlflow.log_table(pd.DataFrame(table_rows(report)), artifact_file="benchmark/table.json")
    with tempfile.TemporaryDirectory(prefix="benchmark-files-") as tmp:
        for name, data in files.items():
            (Path(tmp) / name).write_bytes(data)
            mlflow.log_artifact(str(Path(tmp) / name), artifact_path="benchmark")
    mlflow.set_tags(
        {
            "bench.best_variant": report.best_variant,
            "bench.device": report.device_name,
            "mlflow.note.content": description(report, report_uri),
        }
    )
