"""The pipeline's MLflow run, as every step shares it: reach the server, open or join the run.

The workflow's first task creates one run and passes its id to every step; a step joins
it with ``open_run(cfg, run_id)`` and leaves it RUNNING; the exit handler ends it with the
workflow's status (``python -m steps.tracking``). A step run alone (no id) starts and ends
a run of its own.

The tracking URI comes from ``tracking.uri``, overridden by ``MLFLOW_TRACKING_URI``. A
server that does not answer ``/health`` within ``tracking.startup_timeout_s`` is a
``TrackingError`` at start-up, before any work, not a hang at the end of a long run.
Metrics go out batched (one ``log_metrics`` per step, all keys at once) and
asynchronously (``synchronous=False``); ``finish`` flushes them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import mlflow
from mlflow.exceptions import MlflowException

from steps.common.config import TrackingConfig

LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


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
    """The run's page in the MLflow UI. A store that is a file (SQLite, ./mlruns) has no
    page of its own: the link is where ``mlflow ui --backend-store-uri <uri>`` serves it."""
    base = (cfg.ui_url or tracking_uri(cfg)).rstrip("/")
    if not base.startswith(("http://", "https://")):
        base = LOCAL_UI
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
            # MLflow refuses to resume a run outside the active experiment (one set earlier
            # in this process, or MLFLOW_EXPERIMENT_NAME/_ID in the user's environment)
            experiment = mlflow.MlflowClient().get_run(run_id).info.experiment_id
            mlflow.set_experiment(experiment_id=experiment)
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
