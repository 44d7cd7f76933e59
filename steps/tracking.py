"""The CLI that opens and closes the pipeline's MLflow run (helpers: steps.common.pipeline_run).

    python -m steps.tracking start --run-name NAME [--tag K=V ...] [--outputs-dir DIR]
    python -m steps.tracking end --run-id ID --status {Succeeded,Failed,Error,...}
                                 [--argo-url URL] [--outputs-dir DIR]
    (both take [--config FILE] [--set section.field=value ...] [--debug])

The workflow's first task creates one run and passes its id to every step; the exit
handler ends it with the workflow's status, and copies the run's pictures (the training
curves, the confusion matrix, the benchmark plot) into its outputs directory, where Argo
picks them up as output artifacts the UI shows. The tracking URI comes from ``tracking.uri``,
overridden by ``MLFLOW_TRACKING_URI``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import mlflow
from mlflow.exceptions import MlflowException

from steps.common.config import ConfigError, PipelineConfig, load_config
from steps.common.pipeline_run import TrackedRun, TrackingError, connect, run_url
from steps.common.step_cli import add_common, exit_process, run_main, step_seconds, write_outputs
from steps.common.version import package_version

# output file -> the run's artifact: what the train and benchmark steps log
PICTURES = {
    "curves.png": "plots/curves.png",
    "confusion_matrix.png": "plots/confusion_matrix.png",
    "benchmark.png": "benchmark/benchmark.png",
}
NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI
STOPPED = "**Stopped**"  # the description's line for a local endpoint gone with its run
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.tracking", description="Open or close the pipeline's MLflow run."
    )
    common = argparse.ArgumentParser(add_help=False)
    add_common(common, mlflow_run=False)  # start: run_id, run_url; both: summary.json
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", parents=[common], help="create the pipeline's run")
    start.add_argument("--run-name", required=True, help="run name, e.g. the workflow name")
    start.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
    end = commands.add_parser("end", parents=[common], help="terminate the pipeline's run")
    end.add_argument("--run-id", required=True)
    end.add_argument("--status", required=True, choices=sorted(ARGO_TO_MLFLOW))
    end.add_argument("--argo-url", help="the workflow's page in the Argo UI, tagged on the run")
    end.add_argument(
        "--failures", default="", help="{{workflow.failures}}: a stopped run ends KILLED"
    )
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
        stopped = was_stopped(args.failures)
        result = end_pipeline_run(cfg, args.run_id, args.status, args.argo_url, stopped)
        print(f"MLflow run {args.run_id}: {result} (workflow {args.status})", file=sys.stderr)
        if args.outputs_dir is not None:
            copied = copy_pictures(args.run_id, args.outputs_dir)
            print(f"pictures: {', '.join(copied) or 'none logged'}", file=sys.stderr)
    write_outputs(args.outputs_dir, {**outputs, "summary.json": step_seconds(begun)})
    if args.command == "start":
        print(result)
    return result


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


def was_stopped(failures: str) -> bool:
    """Whether ``{{workflow.failures}}`` shows ``argo stop``: Argo then ends the workflow
    Failed, its running nodes Failed with "Stopped with strategy 'Stop'". Argo v4.0.5
    (workflow/controller/operator.go) hands over the failed nodes' JSON ``strconv.Quote``-d,
    a JSON string holding the JSON list: decoded until it is not a string."""
    try:
        nodes = json.loads(failures or "null")
        if isinstance(nodes, str):
            nodes = json.loads(nodes)
    except ValueError:
        return False
    if not isinstance(nodes, list):
        return False
    return any(
        isinstance(n, dict) and str(n.get("message", "")).startswith("Stopped with strategy")
        for n in nodes
    )


def end_pipeline_run(
    cfg: PipelineConfig,
    run_id: str,
    argo_status: str,
    argo_url: str | None = None,
    stopped: bool = False,
) -> str:
    """Tag the Argo outcome and link, terminate the run; return the MLflow status
    (KILLED for a stopped workflow, which Argo reports as Failed)."""
    status = "KILLED" if stopped else ARGO_TO_MLFLOW[argo_status]
    connect(cfg.tracking)
    client = mlflow.MlflowClient()
    try:
        client.set_tag(run_id, "argo.status", argo_status)
        if argo_url:
            client.set_tag(run_id, "argo.workflow_url", argo_url)
        tags = client.get_run(run_id).data.tags
        if is_loopback(tags.get("serving.url", "")):
            note = stopped_note(tags.get(NOTE_TAG, ""), tags["serving.url"])
            client.set_tag(run_id, NOTE_TAG, note)
        with contextlib.redirect_stdout(sys.stderr):
            client.set_terminated(run_id, status=status)
    except MlflowException as exc:
        raise TrackingError(f"cannot end run {run_id}: {exc.message}") from None
    return status


def is_loopback(url: str) -> bool:
    """A URL on this machine: a local run's InferenceService (a cluster's never is)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def stopped_note(note: str, url: str) -> str:
    """The run's description with one line saying that its endpoint is gone: a local run
    stops its InferenceService when it ends, and the URL above it no longer answers."""
    kept = [line for line in note.splitlines() if not line.startswith(STOPPED)]
    while kept and not kept[-1].strip():
        kept.pop()
    line = (
        f"{STOPPED} `{url}` was this local run's server: it stopped when the run ended "
        "(`flows/cifar.py serve` serves the champion again)"
    )
    return "\n".join([*kept, "", line]) if kept else line


def copy_pictures(run_id: str, directory: Path) -> list[str]:
    """The run's pictures that exist (a failed workflow may have none) into ``directory``;
    the run is already ended, so a picture that cannot be read is skipped, not an error."""
    client = mlflow.MlflowClient()
    directory.mkdir(parents=True, exist_ok=True)
    copied: list[str] = []
    listed: dict[str, set[str]] = {}
    for name, artifact in PICTURES.items():
        folder, _, _ = artifact.rpartition("/")
        try:
            if folder not in listed:  # one listing per folder: two pictures share plots/
                listed[folder] = {a.path for a in client.list_artifacts(run_id, folder)}
            if artifact not in listed[folder]:
                continue
            with tempfile.TemporaryDirectory(prefix="pictures-") as tmp:
                local = client.download_artifacts(run_id, artifact, tmp)
                shutil.copyfile(local, directory / name)
        except (MlflowException, OSError) as exc:
            print(f"warning: {artifact} of run {run_id} not copied: {exc}", file=sys.stderr)
            continue
        copied.append(name)
    return copied


def _parse_tags(items: list[str]) -> dict[str, str]:
    tags = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--tag {item!r}: expected KEY=VALUE")
        tags[key] = value
    return tags


def main(argv: list[str] | None = None) -> int:
    return run_main("tracking", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    exit_process(main())
