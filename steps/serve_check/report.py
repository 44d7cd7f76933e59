"""What the live check leaves behind: ``summary.json`` (``steps.common.contracts.serve_check``)
and the output parameters, and in
the pipeline's MLflow run the ``serving/...`` metrics, the ``serving.url`` (and on a
failure ``serving.rollback``) tags, and the endpoint's lines in the run's description.

Metrics: ``serving/c{N}/{accuracy,p50_ms,p99_ms,requests_per_s,images_per_s}`` per
concurrency N; the headline ``serving/accuracy`` is the lowest over the concurrencies,
``serving/p50_ms`` and ``serving/p99_ms`` one client's latency (the lowest concurrency),
``serving/requests_per_s`` and ``serving/images_per_s`` the throughput at the highest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from steps.common.config import PipelineConfig
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.serve_check import (
    ConcurrencyResult,
    ExpectedAccuracy,
    ServeCheckSummary,
)
from steps.common.step_cli import step_seconds
from steps.serve_check.expected import Expected
from steps.serve_check.load import Batches
from steps.serve_check.rollback import ROLLBACK_TAG

NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI
NOTE_PREFIXES = ("**Endpoint**", "**Rollback**")  # this step's lines, replaced on a retry
STATS = ("accuracy", "p50_ms", "p99_ms", "requests_per_s", "images_per_s")


@dataclass
class Check:
    """One check's outcome (steps/serve_check/check.py's ``run_check``), what the report
    reads: each concurrency's pass, the first thing that went wrong (a verdict), whether
    the endpoint said it serves the deployed version, and the protocol it was spoken to in."""

    results: list[ConcurrencyResult] = field(default_factory=list)
    failure: str | None = None
    version_confirmed: bool = False
    protocol: str = ""


def summary(
    start: float,
    url: str,
    batches: Batches,
    expected: Expected,
    cfg: PipelineConfig,
    report: BenchmarkReport,
    check: Check,
    decision: str | None,
) -> ServeCheckSummary:
    results = check.results
    promotion = report.promotion
    done = check.failure is None
    return ServeCheckSummary(
        **step_seconds(start),
        url=url,
        passed=done,
        failure=check.failure,
        rollback=decision,
        accuracy=min(r.accuracy for r in results) if done else None,
        expected_accuracy=ExpectedAccuracy(*expected),
        accuracy_margin=cfg.benchmark.accuracy_margin,
        images=batches.images,
        benchmark_images=report.test_images,
        requests_per_pass=len(batches.images_by_request),
        protocol=check.protocol,
        by_concurrency={r.concurrency: r for r in results},
        version=promotion.version,
        # GET /v2/models/<name> said this version is served (False: no such route there)
        version_confirmed=check.version_confirmed,
        previous_version=promotion.previous_version,
    )


def outputs(result: ServeCheckSummary) -> dict[str, Any]:
    accuracy = result.accuracy
    return {
        "passed": "true" if result.passed else "false",
        "accuracy": "" if accuracy is None else f"{accuracy:.6f}",
        "previous-version": result.previous_version,
        ServeCheckSummary.DOCUMENT: result.document(),
    }


def metrics(result: ServeCheckSummary) -> dict[str, float]:
    runs = sorted(result.by_concurrency.values(), key=lambda r: r.concurrency)
    if not runs:
        return {}
    values = {
        f"serving/c{r.concurrency}/{stat}": float(getattr(r, stat)) for r in runs for stat in STATS
    }
    values["serving/accuracy"] = min(r.accuracy for r in runs)
    values["serving/p50_ms"] = runs[0].p50_ms
    values["serving/p99_ms"] = runs[0].p99_ms
    values["serving/requests_per_s"] = runs[-1].requests_per_s
    values["serving/images_per_s"] = runs[-1].images_per_s
    return values


def note_lines(result: ServeCheckSummary) -> list[str]:
    """The endpoint's lines in the run's description."""
    url = result.url
    if not result.passed:
        return [
            f"**Endpoint** `{url}`: live check FAILED: {result.failure}",
            "",
            f"**Rollback** {result.rollback}",
        ]
    runs = sorted(result.by_concurrency.values(), key=lambda r: r.concurrency)
    first, last = runs[0], runs[-1]
    expected = result.expected_accuracy
    return [
        f"**Endpoint** `{url}`: live check passed: accuracy {result.accuracy:.4f} on "
        f"{result.images} test images (benchmark {expected.low:.4f}, "
        f"{expected.variants}); p50 {first.p50_ms:.1f} ms, p99 {first.p99_ms:.1f} ms "
        f"at concurrency {first.concurrency}; {last.requests_per_s:.1f} requests/s "
        f"({last.images_per_s:,.0f} images/s) at concurrency {last.concurrency}"
    ]


def merged_note(note: str, lines: list[str]) -> str:
    """``note`` (what the benchmark wrote) without an earlier attempt's endpoint lines,
    then ``lines``."""
    kept = [line for line in note.splitlines() if not line.startswith(NOTE_PREFIXES)]
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join([*kept, "", *lines]) if kept else "\n".join(lines)


def log_check(run_id: str, result: ServeCheckSummary) -> None:
    """Metrics, tags and description into the pipeline's run (the active one)."""
    import mlflow

    values = metrics(result)
    if values:
        mlflow.log_metrics(values, step=0)
    note = mlflow.MlflowClient().get_run(run_id).data.tags.get(NOTE_TAG, "")
    tags = {
        "serving.url": result.url,
        "serving.passed": str(result.passed).lower(),
        NOTE_TAG: merged_note(note, note_lines(result)),
    }
    if not result.passed:
        tags[ROLLBACK_TAG] = f"{result.failure}; {result.rollback}"[:5000]
    mlflow.set_tags(tags)
