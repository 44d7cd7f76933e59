"""What ``python flows/cifar.py`` prints after a local run, and the commands in it.

Every command it prints runs as printed in the shell the user typed into, nothing assumed
on PATH: this interpreter and this checkout's ``flows/cifar.py`` as paths from the current
directory (``.venv/bin/python flows/cifar.py`` from the repository root, after the README's
set-up, which activates nothing), MLflow's CLI from beside the interpreter. After a run:
what to do next (serve the champion, browse the run, run again with ``-p``, review it
with ``get``, ``logs`` and its page); after a failure, ``--resume`` only where it can
help: a step's user error (exit 2, such as the data source out of reach) fails a resumed
run the same way, since it keeps its parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steps.common.config import REPO_ROOT, PipelineConfig

if TYPE_CHECKING:
    from flows.local.status import RunResult
    from flows.local.workflow import LocalRunner

USER_ERROR = 2  # a step's exit code for what the user passed (steps/common/step_cli.py)
INVOCATION = "cli.json"  # in the run directory: what the run was started with, for --resume
RUN_URL = "workflow.outputs.parameters.mlflow-run-url"


def shown(path: Path | str) -> str:
    """A path as a command given here takes it: relative to the current directory when
    inside it, else absolute; quoted for a POSIX shell."""
    path = Path(path).absolute()
    try:
        text = str(path.relative_to(Path.cwd()))
    except ValueError:
        text = str(path)
    return shlex.quote(text)


def python() -> str:
    """This interpreter (the venv's, not whatever ``python`` is on PATH)."""
    return shown(sys.executable)


def program() -> str:
    """``flows/cifar.py`` as this interpreter runs it from here."""
    return f"{python()} {shown(REPO_ROOT / 'flows' / 'cifar.py')}"


def mlflow_ui(uri: str) -> str:
    """MLflow's UI over a local store: the ``mlflow`` script installed beside this
    interpreter, else its module."""
    script = Path(sys.executable).parent / "mlflow"
    mlflow = shown(script) if script.is_file() else f"{python()} -m mlflow"
    return f"{mlflow} ui --backend-store-uri {shlex.quote(uri)}"


def config_args(args: argparse.Namespace) -> list[str]:
    """``--config`` and ``--set`` as the user gave them (paths as the user's shell reaches
    them from here), for the commands printed next."""
    words = ["--config", shown(args.config)] if args.config else []
    for override in args.overrides:
        words += ["--set", shlex.quote(override)]
    return words


def local_store(uri: str) -> bool:
    return uri.startswith(("sqlite:", "file:")) or "://" not in uri


def mlflow_line(tracking_uri: str, run_url: str | None) -> str:
    if local_store(tracking_uri):
        page = run_url or "http://127.0.0.1:5000"
        return f"Browse the run in MLflow (then open {page}): {mlflow_ui(tracking_uri)}"
    return f"MLflow: {run_url or tracking_uri}"


def save_invocation(run_dir: Path, words: list[str], tracking_uri: str) -> None:
    """What a new run was started with, so that the lines after its ``--resume`` can name
    the same config."""
    if run_dir.is_dir():
        text = json.dumps({"config_args": words, "tracking_uri": tracking_uri})
        (run_dir / INVOCATION).write_text(text + "\n")


def load_invocation(run_dir: Path) -> tuple[list[str], str | None]:
    try:
        data = json.loads((run_dir / INVOCATION).read_text())
        return list(data["config_args"]), str(data["tracking_uri"])
    except (OSError, ValueError, KeyError, TypeError):
        return [], None  # a run started by an older version: the default config's lines


def after_run(
    args: argparse.Namespace, cfg: PipelineConfig, runner: LocalRunner, result: RunResult | None
) -> list[str]:
    """The lines after a local run's summary (``result``), or after a stop (None)."""
    if args.resume is None:
        words, tracking_uri = config_args(args), cfg.tracking.uri
        save_invocation(runner.run_dir, words, tracking_uri)
    else:
        words, saved_uri = load_invocation(runner.run_dir)
        tracking_uri = saved_uri or cfg.tracking.uri
    run = program()
    resume = f"{run} --resume {shown(runner.run_dir)}"
    if result is None:
        lines = [f"Continue it with: {resume}", *review_lines(run, runner.run_dir, None)]
    elif result.status == "Succeeded":
        lines = next_commands(run, words, runner.globals)
        lines += ["  " + line for line in review_lines(run, runner.run_dir, None)]
    else:
        lines = after_failure(run, words, result, resume)
        failed = result.failed_task
        lines += review_lines(run, runner.run_dir, failed.name if failed else None)
    return [*lines, mlflow_line(tracking_uri, runner.globals.get(RUN_URL))]


def review_lines(run: str, run_dir: Path, failed: str | None) -> list[str]:
    """How to look at the run again, as the argo CLI and UI would: its node tree, its
    logs (the failed task's), its page."""
    # a run's name reaches it from the directory that holds runs/, else its path does
    where = run_dir.name if shown(run_dir) == f"runs/{run_dir.name}" else shown(run_dir)
    logs = (
        f"{run} logs {where} {failed}" if failed else f"{run} logs {where} (a task's: add its name)"
    )
    return [
        f"review it as argo would: {run} get {where}, {logs}",
        f"its page (the DAG, each task's log): {shown(run_dir / 'index.html')} "
        f"({run} ui serves every run)",
    ]


def next_commands(run: str, words: list[str], values: dict[str, Any]) -> list[str]:
    """After a good run: serve what it registered, run again changing a parameter."""
    again = " ".join([run, *words])
    epochs = str(values.get("workflow.parameters.epochs", ""))
    more = f"{int(epochs) * 2}" if epochs.isdigit() else "8"
    return [
        "Next:",
        f"  serve the champion here (Ctrl-C stops it): {' '.join([run, 'serve', *words])}",
        f"  run again with other parameters (-p NAME=VALUE, as argo submit -p): {again} "
        f"-p epochs={more}",
    ]


def after_failure(run: str, words: list[str], result: RunResult, resume: str) -> list[str]:
    """``--resume`` after a fault; a new run where the run's own parameters were wrong."""
    failed = result.failed_task
    if failed is None or failed.exit_code != USER_ERROR:
        return [f"Continue after a fix with: {resume}"]
    again = " ".join([run, *words])
    if failed.name != "stage":
        return [
            f"{failed.name} refused this run's parameters (see its line above); --resume would "
            f"keep them. Start a new run with the fix: {again} --set SECTION.FIELD=VALUE"
        ]
    smoke = shown(REPO_ROOT / "configs" / "smoke.yaml")
    return [
        "The data could not be staged (see its line above); --resume would try the same "
        "source again. Start a new run instead:",
        f"  on synthetic data, the smoke config (about a minute): {run} --config {smoke}",
        f"  or from a copy of the tarball: {again} --set data.source=PATH/cifar-10-python.tar.gz",
    ]


def missing_champion(cfg: PipelineConfig, args: argparse.Namespace) -> str | None:
    """Why ``flows/cifar.py serve`` has nothing to serve, in one line with the two ways
    forward; None when the store holds the champion (or is a server: the server answers).
    Reads the store without creating it (MLflow would make an empty ``mlflow.db`` here)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or cfg.tracking.uri
    wanted = f"models:/{cfg.benchmark.registered_model}@{cfg.benchmark.alias}"
    run = program()
    smoke = shown(REPO_ROOT / "configs" / "smoke.yaml")
    ways = (
        f"train one first ({run} --config {smoke}, about a minute) or serve another model "
        f"({' '.join([run, 'serve', *config_args(args)])} --model URI)"
    )
    if uri.startswith("sqlite:///"):
        store = Path(uri.removeprefix("sqlite:///"))
        if not store.is_file():
            return f"no champion to serve: no MLflow store at {store} (no run here yet); {ways}"
    if not uri.startswith("sqlite:"):
        return None  # a server, or a file store: the server says what is missing
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        MlflowClient(tracking_uri=uri).get_model_version_by_alias(
            cfg.benchmark.registered_model, cfg.benchmark.alias
        )
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None  # the server says what else is wrong
        return f"no champion to serve: {uri} holds no {wanted}; {ways}"
    return None
