"""MLflow helpers shared by the steps, and the CLI that opens and closes the pipeline's run.

    python -m steps.tracking start --run-name NAME [--tag K=V ...] [--outputs-dir DIR]
    python -m steps.tracking end --run-id ID --status {Succeeded,Failed,Error,...}
                                 [--argo-url URL]
    (both take [--config FILE] [--set section.field=value ...] [--debug])

The workflow's first task creates one run and passes its id to every step; a step joins
it with ``open_run(cfg, run_id)`` and leaves it RUNNING; the exit handler ends it with the
workflow's status. A step run alone (no id) starts and ends a run of its own.

The tracking URI comes from ``tracking.uri``, overridden by ``MLFLOW_TRACKING_URI``. A
server that does not answer ``/health`` within ``tracking.startup_timeout_s`` is a
``TrackingError`` at start-up, before any work, not a hang at the end of a long run.
Metrics go out batched (one ``log_metrics`` per step, all keys at once) and
asynchronously (``synchronous=False``); ``finish`` flushes them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import mlflow
from mlflow.exceptions import MlflowException

from steps.common.config import (
    ConfigError,
    PipelineConfig,
    TrackingConfig,
    load_config,
    package_version,
)
from steps.common.step_cli import exit_process, step_seconds, write_outputs

OUTPUTS_ENV = "CIFAR_OUTPUTS_DIR"
# Argo's {{workflow.status}} -> MLflow run status; phases other than these end as KILLED.
ARGO_TO_MLFLOW = {
    "Succeeded": "FINISHED",
    "Failed": "FAILED",
    "Error": "FAILED",
    "Running": "KILLED",
    "Pending": "KILLED",
    "Terminated": "KILLED",
    "Stopped": "KILLED",
    "Skipped": "KILLED",
    "Omitted": "KILLED",
}


class TrackingError(RuntimeError):
    """MLflow could not be reached or refused a request; the message says which and why."""


def tracking_uri(cfg: TrackingConfig) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or cfg.uri


def wait_until_reachable(uri: str, timeout_s: float) -> None:
    """Poll an HTTP tracking server's ``/health`` until it answers; local stores pass."""
    if not uri.startswith(("http://", "https://")):
        return
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            with urllib.request.urlopen(
                f"{uri.rstrip('/')}/health", timeout=min(5.0, remaining)
            ) as response:
                if response.status < 500:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code < 500:  # an auth proxy answering 401/403 is a reachable server
                return
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", None) or exc
            last = str(reason).splitlines()[0] if str(reason) else type(exc).__name__
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
    raise TrackingError(
        f"MLflow tracking server {uri} unreachable for {timeout_s:g} s ({last}); start it, "
        "fix tracking.uri / MLFLOW_TRACKING_URI, or set tracking.enabled=false"
    )


def connect(cfg: TrackingConfig) -> str:
    """Point the MLflow client at the configured server once it answers; return the URI."""
    uri = tracking_uri(cfg)
    wait_until_reachable(uri, cfg.startup_timeout_s)
    mlflow.set_tracking_uri(uri)
    return uri


def run_url(cfg: TrackingConfig, experiment_id: str, run_id: str) -> str:
    base = (cfg.ui_url or tracking_uri(cfg)).rstrip("/")
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"


def _system_metrics_available() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class TrackedRun:
    """The active run of this process; ``joined`` runs are left RUNNING by ``finish``."""

    run_id: str
    experiment_id: str
    joined: bool
    url: str
    notes: list[str] = field(default_factory=list)

    def log_params(self, params: dict[str, object]) -> None:
        """One synchronous batch at start-up: a conflict (a param logged before with another
        value, e.g. a restarted step with changed overrides) fails now, not at the end."""
        try:
            mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})
        except MlflowException as exc:
            message = exc.message.splitlines()[0]
            raise TrackingError(f"run {self.run_id}: cannot log the params ({message})") from None

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """All of one step's metrics in one asynchronous request."""
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step, synchronous=False)

    def finish(self, succeeded: bool) -> None:
        """Flush queued logging; end an own run, leave a joined one RUNNING for the next step."""
        mlflow.flush_async_logging()
        status = "RUNNING" if self.joined else "FINISHED" if succeeded else "FAILED"
        with contextlib.redirect_stdout(sys.stderr):  # MLflow prints links; stdout is ours
            mlflow.end_run(status=status)


def open_run(
    cfg: TrackingConfig,
    run_id: str | None = None,
    run_name: str | None = None,
    tags: dict[str, str] | None = None,
) -> TrackedRun:
    """Join the pipeline's run by id, or start a run in ``cfg.experiment``."""
    connect(cfg)
    system = cfg.system_metrics and _system_metrics_available()
    notes = [] if system or not cfg.system_metrics else ["system metrics off: psutil missing"]
    try:
        if run_id:
            active = mlflow.start_run(run_id=run_id, tags=tags, log_system_metrics=system)
        else:
            mlflow.set_experiment(cfg.experiment)
            active = mlflow.start_run(run_name=run_name, tags=tags, log_system_metrics=system)
    except MlflowException as exc:
        what = f"run {run_id}" if run_id else f"a run in experiment {cfg.experiment!r}"
        raise TrackingError(f"cannot open {what} at {tracking_uri(cfg)}: {exc.message}") from None
    info = active.info
    url = run_url(cfg, info.experiment_id, info.run_id)
    return TrackedRun(info.run_id, info.experiment_id, bool(run_id), url, notes)


# --- the workflow's CLI ----------------------------------------------------------------


def start_pipeline_run(
    cfg: PipelineConfig, run_name: str, tags: dict[str, str] | None = None
) -> TrackedRun:
    """Create the pipeline's run (RUNNING until ``end_pipeline_run``) and return it."""
    connect(cfg.tracking)
    client = mlflow.MlflowClient()
    all_tags = {"pipeline": "cifar-pipeline", "pipeline.version": package_version()}
    all_tags.update(tags or {})
    try:
        experiment = client.get_experiment_by_name(cfg.tracking.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment
            else client.create_experiment(cfg.tracking.experiment)
        )
        run = client.create_run(experiment_id, run_name=run_name, tags=all_tags)
    except MlflowException as exc:
        raise TrackingError(f"cannot create the pipeline's run: {exc.message}") from None
    url = run_url(cfg.tracking, experiment_id, run.info.run_id)
    return TrackedRun(run.info.run_id, experiment_id, joined=False, url=url)


def end_pipeline_run(
    cfg: PipelineConfig, run_id: str, argo_status: str, argo_url: str | None = None
) -> str:
    """Tag the Argo outcome and link, terminate the run; return the MLflow status."""
    status = ARGO_TO_MLFLOW[argo_status]
    connect(cfg.tracking)
    client = mlflow.MlflowClient()
    try:
        client.set_tag(run_id, "argo.status", argo_status)
        if argo_url:
            client.set_tag(run_id, "argo.workflow_url", argo_url)
        with contextlib.redirect_stdout(sys.stderr):
            client.set_terminated(run_id, status=status)
    except MlflowException as exc:
        raise TrackingError(f"cannot end run {run_id}: {exc.message}") from None
    return status


def _parse_tags(items: list[str]) -> dict[str, str]:
    tags = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--tag {item!r}: expected KEY=VALUE")
        tags[key] = value
    return tags


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.tracking", description="Open or close the pipeline's MLflow run."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="pipeline config YAML (default: configs/local.yaml)")
    common.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE"
    )
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    common.add_argument(
        "--outputs-dir",
        type=Path,
        default=os.environ.get(OUTPUTS_ENV),
        help=f"start: write run_id and run_url here; both: summary.json (default: ${OUTPUTS_ENV})",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", parents=[common], help="create the pipeline's run")
    start.add_argument("--run-name", required=True, help="run name, e.g. the workflow name")
    start.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
    end = commands.add_parser("end", parents=[common], help="terminate the pipeline's run")
    end.add_argument("--run-id", required=True)
    end.add_argument("--status", required=True, choices=sorted(ARGO_TO_MLFLOW))
    end.add_argument("--argo-url", help="the workflow's page in the Argo UI, tagged on the run")
    return parser


def run(args: argparse.Namespace) -> str:
    begun = time.perf_counter()
    cfg = load_config(args.config, args.overrides)
    outputs: dict[str, str] = {}
    if args.command == "start":
        started = start_pipeline_run(cfg, args.run_name, _parse_tags(args.tag))
        outputs = {"run_id": started.run_id, "run_url": started.url}
        print(f"MLflow run: {started.url}", file=sys.stderr)
        result = started.run_id
    else:
        result = end_pipeline_run(cfg, args.run_id, args.status, args.argo_url)
        print(f"MLflow run {args.run_id}: {result} (workflow {args.status})", file=sys.stderr)
    write_outputs(args.outputs_dir, {**outputs, "summary.json": step_seconds(begun)})
    if args.command == "start":
        print(result)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except ConfigError as exc:
        if args.debug:
            raise
        print(f"tracking: error: {exc}", file=sys.stderr)
        return 2
    except TrackingError as exc:
        if args.debug:
            raise
        print(f"tracking: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    exit_process(main())
