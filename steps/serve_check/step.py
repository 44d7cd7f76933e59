"""Check the live endpoint: the staged test split over HTTP, as the benchmark measured it.

    python -m steps.serve_check --url URL --dataset DATASET_URI --benchmark BENCHMARK
        [--mlflow-run-id ID] [--outputs-dir DIR] [--batch 32] [--timeout-s 60]
        [--wait-s S] [--time-limit-s 600] [--config F] [--set k=v ...] [--debug]

BENCHMARK is the benchmark step's ``benchmark.json``: a path or URI to it, its report URI
(the file in it is read), or the document itself (``{...}``, as an Argo parameter carries
it). The check waits, within ``--wait-s`` (default ``serving.ready_timeout_s``, the deploy
step's deadline too), for ``GET URL/ping`` and, when this run's benchmark promoted a
version, for ``GET URL/v2/models/<name>`` to say that version is served (three answers in
a row on new connections): a re-applied InferenceService reads Ready before its new pods
roll out (flows/serving_step.py), so this is the deployment's real gate. Then, within
``--time-limit-s``, it sends the first ``serving.check_samples`` test images (default: the
``test_images`` the benchmark measured accuracy on) in requests of ``--batch`` images, over
the protocol the endpoint answers (``serving.check_protocol``, ``steps.serve_check.http``:
the Open Inference Protocol with binary tensors, or ``URL/invocations``), at each of
``serving.check_concurrency``; every request answered with
one class in 0..9 per image. The served accuracy must lie within
``benchmark.accuracy_margin`` of the benchmark's accuracy on the same images
(``steps.common.per_image``) for what the registered model runs
(``promotion.served_by_batch``: the variants its dispatcher picks; the eager FP32 model
where it registered no pyfunc), at every concurrency.

The endpoint's answer is the verdict, and final: a wrong answer or accuracy, another
version served, nothing served within ``--wait-s``, or a pass past ``--time-limit-s``
moves the alias back to the previous champion (``steps.serve_check.rollback``), prints
one line naming both and exits 3 (``VERDICT_EXIT``: the workflow does not retry it). A
check whose version no longer holds the alias (an earlier attempt rolled it back) fails
the same way without checking again, so a retry never passes after a rollback. What is no
answer (the endpoint dropping a connection once it served the version, storage or MLflow
failing, a crash) exits 1 and rolls nothing back: the workflow retries it, and its
rollback tasks undo the deployment if the last attempt fails too (flows/serving_step.py).
Outputs: ``passed``, ``accuracy``, ``previous-version``, ``summary.json``; MLflow:
``serving/...`` metrics, ``serving.url`` tag and a line in the run's description
(``steps.serve_check.report``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any
from urllib.parse import urlparse

from steps.common.config import PipelineConfig, StorageConfig, load_config
from steps.common.dataset import read_manifest, read_split
from steps.common.per_image import mixed_accuracy_bounds
from steps.common.step_cli import add_common, run_main, tracking_wanted, write_outputs
from steps.common.storage import open_store
from steps.common.storage.uri import split_uri
from steps.serve_check.http import BadAnswer, Endpoint, Unreachable
from steps.serve_check.load import Batches, TimedOut, measure
from steps.serve_check.report import log_check, outputs, summary
from steps.serve_check.rollback import roll_back_promotion, rolled_back_before


class BadInput(ValueError):
    """A command-line value the check cannot use (exit 2)."""


VERDICT_EXIT = 3  # the endpoint failed the check: final, the alias rolled back


class CheckFailed(RuntimeError):
    """The live check failed; the message names what failed and what was rolled back."""


class NoVerdict(RuntimeError):
    """No verdict on the endpoint (exit 1, retried): it stopped answering once it served
    the version."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.serve_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--url", required=True, help="the endpoint, e.g. http://127.0.0.1:8080")
    parser.add_argument("--dataset", required=True, help="DATASET_URI (its test split is sent)")
    parser.add_argument("--benchmark", required=True, help="benchmark.json: path, URI or JSON")
    parser.add_argument("--batch", type=int, default=32, help="images per request")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="connect/read timeout")
    parser.add_argument(
        "--wait-s",
        type=float,
        default=None,
        help="wait for the version to be served (default: serving.ready_timeout_s)",
    )
    parser.add_argument(
        "--time-limit-s", type=float, default=600.0, help="the check, once the version is served"
    )
    add_common(parser)
    return parser


def check_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BadInput(f"--url {url!r}: not an http:// or https:// URL with a host")
    return url.rstrip("/")


def read_benchmark(value: str, storage: StorageConfig) -> dict[str, Any]:
    """The benchmark document from its text, its file, or the report URI holding it."""
    text, where = value, "--benchmark"
    if not value.lstrip().startswith("{"):
        uri = value
        store, key = split_uri(uri, storage)
        if not store.exists(key):  # a report URI: the benchmark.json in it
            uri = f"{value.rstrip('/')}/benchmark.json"
            store, key = split_uri(uri, storage)
        if not store.exists(key):
            raise BadInput(f"--benchmark {uri}: no such file; pass the benchmark step's output")
        text, where = store.read_bytes(key).decode(errors="replace"), f"--benchmark {uri}"
    try:
        doc = json.loads(text)
        doc["variants"]["eager"]["accuracy"], doc["test_images"]
    except (ValueError, KeyError, TypeError):
        raise BadInput(f"{where}: not a benchmark.json (steps.benchmark's report)") from None
    return doc


def check_count(cfg: PipelineConfig, doc: dict[str, Any], available: int) -> int:
    """How many test images the check sends: the benchmark's, or ``serving.check_samples``
    of them (never more than the benchmark measured, whose accuracy it must match)."""
    measured = int(doc["test_images"])
    return min(cfg.serving.check_samples or measured, measured, available)


def expected_accuracy(doc: dict[str, Any], count: int | None = None) -> tuple[float, float, str]:
    """The benchmark's accuracy for what the registered model runs, over its first
    ``count`` test images (default: all it measured), as a range, and the variants' names.
    Its dispatcher answers each request with the variant of its batch size, and
    concurrent requests may be batched onto another, so an image may be answered by any
    of them: from the per-image results, the range runs from the images every variant got
    right to those any one did (``per_image.mixed_accuracy_bounds``); an older
    benchmark.json without them gives the lowest and highest variant accuracy."""
    served = doc.get("promotion", {}).get("served_by_batch") or {"any": "eager"}
    names = sorted(set(served.values()))
    measured = int(doc["test_images"])
    count = measured if count is None else count
    missing = f"--benchmark: no measured accuracy for {', '.join(names)}"
    try:
        variants = [doc["variants"][name] for name in names]
    except (KeyError, TypeError):
        raise BadInput(missing) from None
    per_image = all(isinstance(v, dict) and "correct" in v for v in variants)
    if count < measured and not per_image:
        raise BadInput(
            f"serving.check_samples {count} < the benchmark's {measured} images, and its "
            "benchmark.json has no per-image results (an older benchmark): set "
            "serving.check_samples to null"
        )
    try:
        if per_image:
            low, high = mixed_accuracy_bounds([v["correct"] for v in variants], measured, count)
        else:
            values = [float(v["accuracy"]) for v in variants]
            low, high = min(values), max(values)
    except (KeyError, TypeError, ValueError):
        raise BadInput(missing) from None
    return low, high, ", ".join(names)


def check_batches(dataset: str, cfg: PipelineConfig, doc: dict[str, Any], batch: int) -> Batches:
    """The first images of the test split, as many as ``check_count``, in requests of
    ``batch`` (encoded once the endpoint's protocol is known)."""
    store = open_store(dataset, cfg.storage)
    images, labels = read_split(store, read_manifest(store), "test")
    count = check_count(cfg, doc, len(labels))
    starts = range(0, count, batch)
    return Batches(
        [images[i : min(i + batch, count)] for i in starts],
        [labels[i : min(i + batch, count)] for i in starts],
    )


def run_check(
    args: argparse.Namespace,
    cfg: PipelineConfig,
    batches: Batches,
    expected,
    deployed: tuple[str, str] | None = None,
) -> dict:
    """Within ``args.wait_s`` the endpoint answers and serves the ``deployed`` (name,
    version); then, within ``args.time_limit_s``, every concurrency in turn. ``failure``
    names the first thing that went wrong (a verdict); an endpoint that stops answering
    once it served raises ``NoVerdict``."""
    model = deployed[0] if deployed else served_model_name(cfg)
    endpoint = Endpoint(args.url, args.timeout_s, cfg.serving.check_protocol, model)
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    failure, confirmed = None, False
    try:
        endpoint.wait_ready(args.wait_s)
        if deployed is not None:
            spent = time.monotonic() - started
            left = max(0.0, args.wait_s - spent)
            confirmed = endpoint.wait_version(*deployed, left, waited_s=args.wait_s - left)
        batches.encode_for(endpoint)  # the protocol it answers, asked once it is ready
        deadline = time.monotonic() + args.time_limit_s
        for concurrency in sorted(set(cfg.serving.check_concurrency)):
            try:
                results.append(measure(endpoint, batches, concurrency, deadline))
            except Unreachable as exc:  # it served, then dropped us: no verdict
                raise NoVerdict(f"{args.url} stopped answering during the check: {exc}") from None
    except Unreachable as exc:  # nothing served within --wait-s: the deployment failed
        failure = f"{args.url} unreachable: {exc}"
    except BadAnswer as exc:
        failure = f"{args.url}: {exc}"
    except TimedOut as exc:
        failure = f"{args.url}: check not done within {args.time_limit_s:g} s ({exc})"
    finally:
        endpoint.close()
    low, high, names = expected
    margin = cfg.benchmark.accuracy_margin
    for result in results if failure is None else []:
        if not low - margin - 1e-9 <= result["accuracy"] <= high + margin + 1e-9:
            failure = (
                f"served accuracy {result['accuracy']:.4f} at concurrency "
                f"{result['concurrency']} is not the benchmark's {_span(low, high)} "
                f"({names}) within {margin:g}"
            )
            break
    protocol = endpoint.protocol if endpoint.protocol != "auto" else ""
    return {
        "results": results, "failure": failure, "version_confirmed": confirmed,
        "protocol": protocol,
    }  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    cfg = load_config(args.config, args.overrides)
    args.url = check_url(args.url)
    if args.wait_s is None:
        args.wait_s = cfg.serving.ready_timeout_s
    if not 1 <= args.batch <= cfg.serving.max_request_images:
        raise BadInput(f"--batch {args.batch}: use 1..{cfg.serving.max_request_images}")
    if min(args.timeout_s, args.wait_s, args.time_limit_s) <= 0:
        raise BadInput("--timeout-s, --wait-s and --time-limit-s must be more than 0")
    doc = read_benchmark(args.benchmark, cfg.storage)
    batches = check_batches(args.dataset, cfg, doc, args.batch)
    expected = expected_accuracy(doc, batches.images)
    tracked = None
    if tracking_wanted(cfg, args.mlflow_run_id):  # before the check: fail early
        from steps.common.pipeline_run import open_run

        tracked = open_run(cfg.tracking, args.mlflow_run_id, run_name="serve-check")
    promotion = doc.get("promotion", {})
    deployed = deployed_version(cfg, promotion)
    passed = False
    try:
        earlier = rolled_back_before(cfg, promotion) if tracked and deployed else None
        if earlier:  # a retry after a rollback: the verdict stands, nothing is checked again
            check = {"results": [], "failure": earlier, "version_confirmed": False}
        else:
            check = run_check(args, cfg, batches, expected, deployed)
        decision, passed = None, check["failure"] is None
        if check["failure"]:
            decision = roll_back_promotion(cfg, promotion, check["failure"], tracked is not None)
        result = summary(start, args.url, batches, expected, cfg, doc, check, decision)
        if tracked:
            log_check(tracked.run_id, result)
    finally:
        if tracked:  # whatever happened: a joined run stays RUNNING for the next step
            tracked.finish(passed)
    write_outputs(args.outputs_dir, outputs(result))
    if check["failure"]:
        raise CheckFailed(f"{check['failure']}; {decision}")
    print(f"serve-check passed: {args.url} accuracy {result['accuracy']:.4f}")
    return result


def served_model_name(cfg: PipelineConfig) -> str:
    """The name the endpoint's Open Inference Protocol routes take when this run deployed
    nothing: the registered model's (``python -m steps.serve`` of ``models:/NAME@alias``
    answers as NAME)."""
    return cfg.benchmark.registered_model


def deployed_version(cfg: PipelineConfig, promotion: dict[str, Any]) -> tuple[str, str] | None:
    """The registry version the deploy step put behind the endpoint: the one this run's
    benchmark promoted (the check confirms the endpoint serves it); None when it promoted
    nothing (the endpoint is then whatever serves the alias)."""
    if not (promotion.get("promoted") and promotion.get("version")):
        return None
    name = promotion.get("registered_model") or cfg.benchmark.registered_model
    return str(name), str(promotion["version"])


def _span(low: float, high: float) -> str:
    return f"{low:.4f}" if low == high else f"{low:.4f}..{high:.4f}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(
        "serve_check", run, args, user_errors=(BadInput,), exit_codes={CheckFailed: VERDICT_EXIT}
    )
