"""The live check's work: the benchmark's report read (``steps.serve_check.expected``), the
test images sent at each concurrency once the endpoint serves the version this run
deployed, the verdict, a rollback on a failure (``steps.serve_check.rollback``), and the
summary logged (``steps.serve_check.report``)."""

from __future__ import annotations

import argparse
import time

from steps.common.config import PipelineConfig
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.promotion import Promotion
from steps.common.contracts.serve_check import ServeCheckSummary
from steps.common.dataset import read_manifest, read_split
from steps.common.step_cli import tracking_wanted
from steps.common.storage import open_store
from steps.serve_check.expected import Expected, check_count, expected_accuracy, read_benchmark
from steps.serve_check.http import BadAnswer, Endpoint, Unreachable
from steps.serve_check.load import Batches, TimedOut, measure
from steps.serve_check.report import Check, log_check, summary
from steps.serve_check.rollback import roll_back_promotion, rolled_back_before

VERDICT_EXIT = 3  # the endpoint failed the check: final, the alias rolled back


class CheckFailed(RuntimeError):
    """The live check failed; the message names what failed and what was rolled back."""


class NoVerdict(RuntimeError):
    """No verdict on the endpoint (exit 1, retried): it stopped answering once it served
    the version."""


def check_batches(
    dataset: str, cfg: PipelineConfig, report: BenchmarkReport, batch: int
) -> Batches:
    """The first images of the test split, as many as ``check_count``, in requests of
    ``batch`` (encoded once the endpoint's protocol is known)."""
    store = open_store(dataset, cfg.storage)
    images, labels = read_split(store, read_manifest(store), "test")
    count = check_count(cfg, report, len(labels))
    starts = range(0, count, batch)
    return Batches(
        [images[i : min(i + batch, count)] for i in starts],
        [labels[i : min(i + batch, count)] for i in starts],
    )


def run_check(
    args: argparse.Namespace,
    cfg: PipelineConfig,
    batches: Batches,
    expected: Expected,
    deployed: tuple[str, str] | None = None,
) -> Check:
    """Within ``args.wait_s`` the endpoint answers and serves the ``deployed`` (name,
    version); then, within ``args.time_limit_s``, every concurrency in turn. ``failure``
    names the first thing that went wrong (a verdict); an endpoint that stops answering
    once it served raises ``NoVerdict``."""
    model = deployed[0] if deployed else served_model_name(cfg)
    endpoint = Endpoint(args.url, args.timeout_s, cfg.serving.check_protocol, model)
    started = time.monotonic()
    check = Check()
    try:
        endpoint.wait_ready(args.wait_s)
        if deployed is not None:
            spent = time.monotonic() - started
            left = max(0.0, args.wait_s - spent)
            check.version_confirmed = endpoint.wait_version(
                *deployed, left, waited_s=args.wait_s - left
            )
        batches.encode_for(endpoint)  # the protocol it answers, asked once it is ready
        deadline = time.monotonic() + args.time_limit_s
        for concurrency in sorted(set(cfg.serving.check_concurrency)):
            try:
                check.results.append(measure(endpoint, batches, concurrency, deadline))
            except Unreachable as exc:  # it served, then dropped us: no verdict
                raise NoVerdict(f"{args.url} stopped answering during the check: {exc}") from None
    except Unreachable as exc:  # nothing served within --wait-s: the deployment failed
        check.failure = f"{args.url} unreachable: {exc}"
    except BadAnswer as exc:
        check.failure = f"{args.url}: {exc}"
    except TimedOut as exc:
        check.failure = f"{args.url}: check not done within {args.time_limit_s:g} s ({exc})"
    finally:
        endpoint.close()
    low, high, names = expected
    margin = cfg.benchmark.accuracy_margin
    for result in check.results if check.failure is None else []:
        if not low - margin - 1e-9 <= result.accuracy <= high + margin + 1e-9:
            check.failure = (
                f"served accuracy {result.accuracy:.4f} at concurrency "
                f"{result.concurrency} is not the benchmark's {_span(low, high)} "
                f"({names}) within {margin:g}"
            )
            break
    check.protocol = endpoint.protocol if endpoint.protocol != "auto" else ""
    return check


def check_endpoint(args: argparse.Namespace, cfg: PipelineConfig) -> ServeCheckSummary:
    """The whole check of ``args.url`` against ``args.benchmark``: its summary, written
    nowhere yet (the step writes it); on a failure the rollback's decision is in it."""
    start = time.perf_counter()
    report = read_benchmark(args.benchmark, cfg.storage)
    batches = check_batches(args.dataset, cfg, report, args.batch)
    expected = expected_accuracy(report, batches.images)
    tracked = None
    if tracking_wanted(cfg, args.mlflow_run_id):  # before the check: fail early
        from steps.common.pipeline_run import open_run

        tracked = open_run(cfg.tracking, args.mlflow_run_id, run_name="serve-check")
    promotion = report.promotion
    deployed = deployed_version(cfg, promotion)
    passed = False
    try:
        earlier = rolled_back_before(cfg, promotion) if tracked and deployed else None
        if earlier:  # a retry after a rollback: the verdict stands, nothing is checked again
            check = Check(failure=earlier)
        else:
            check = run_check(args, cfg, batches, expected, deployed)
        decision, passed = None, check.failure is None
        if check.failure:
            decision = roll_back_promotion(cfg, promotion, check.failure, tracked is not None)
        result = summary(start, args.url, batches, expected, cfg, report, check, decision)
        if tracked:
            log_check(tracked.run_id, result)
    finally:
        if tracked:  # whatever happened: a joined run stays RUNNING for the next step
            tracked.finish(passed)
    return result


def served_model_name(cfg: PipelineConfig) -> str:
    """The name the endpoint's Open Inference Protocol routes take when this run deployed
    nothing: the registered model's (``python -m steps.serve`` of ``models:/NAME@alias``
    answers as NAME)."""
    return cfg.benchmark.registered_model


def deployed_version(cfg: PipelineConfig, promotion: Promotion) -> tuple[str, str] | None:
    """The registry version the deploy step put behind the endpoint: the one this run's
    benchmark promoted (the check confirms the endpoint serves it); None when it promoted
    nothing (the endpoint is then whatever serves the alias)."""
    if not (promotion.promoted and promotion.version):
        return None
    return promotion.registered_model or cfg.benchmark.registered_model, promotion.version


def _span(low: float, high: float) -> str:
    return f"{low:.4f}" if low == high else f"{low:.4f}..{high:.4f}"
