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
roll out (flows/pipeline/serving_templates.py), so this is the deployment's real gate. Then, within
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
rollback tasks undo the deployment if the last attempt fails too
(flows/pipeline/serving_templates.py).
Outputs: ``passed``, ``accuracy``, ``previous-version``, ``summary.json``
(``steps.common.contracts.serve_check``); MLflow: ``serving/...`` metrics, ``serving.url``
tag and a line in the run's description (``steps.serve_check.report``). The work is
``steps.serve_check.check``; what it expects, ``steps.serve_check.expected``.
"""

from __future__ import annotations

import argparse
from urllib.parse import urlparse

from steps.common.config import load_config
from steps.common.contracts.serve_check import ServeCheckSummary
from steps.common.step_cli import add_common, run_main, write_outputs
from steps.serve_check.check import VERDICT_EXIT, CheckFailed, NoVerdict, check_endpoint
from steps.serve_check.expected import BadInput
from steps.serve_check.report import outputs

__all__ = ["VERDICT_EXIT", "BadInput", "CheckFailed", "NoVerdict", "build_parser", "main", "run"]


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


def run(args: argparse.Namespace) -> ServeCheckSummary:
    cfg = load_config(args.config, args.overrides)
    args.url = check_url(args.url)
    if args.wait_s is None:
        args.wait_s = cfg.serving.ready_timeout_s
    if not 1 <= args.batch <= cfg.serving.max_request_images:
        raise BadInput(f"--batch {args.batch}: use 1..{cfg.serving.max_request_images}")
    if min(args.timeout_s, args.wait_s, args.time_limit_s) <= 0:
        raise BadInput("--timeout-s, --wait-s and --time-limit-s must be more than 0")
    result = check_endpoint(args, cfg)
    write_outputs(args.outputs_dir, outputs(result))
    if not result.passed:
        raise CheckFailed(f"{result.failure}; {result.rollback}")
    print(f"serve-check passed: {args.url} accuracy {result.accuracy:.4f}")
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(
        "serve_check", run, args, user_errors=(BadInput,), exit_codes={CheckFailed: VERDICT_EXIT}
    )
