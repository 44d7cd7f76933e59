"""``python flows/cifar.py`` without ``--render``/``--submit``: the local run. The config
made local (``localize``: relative paths absolute, so every task and the memoization cache
see one artifact root and MLflow store), its data source checked here before anything
starts, then the same WorkflowTemplate and Workflow that ``--submit`` sends, run by the
local runner (``flows.local``) with the closing lines of ``flows.cli.hints``. One
difference: the memo keys name each step's source (``steps/<step>/`` and ``steps/common/``)
where the cluster's name its image (flows/pipeline/memo_keys.py); ``--no-cache`` and
``--refresh STEP`` take no memo entry (for every step, or for a step and what depends on
it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flows.cli import hints, reachable
from flows.cli.builders import Pipeline
from flows.errors import UsageError
from flows.pipeline.train_templates import MULTINODE
from steps.common.config import PipelineConfig
from steps.common.version import git_revision


def localize(cfg: PipelineConfig, cwd: Path | None = None) -> PipelineConfig:
    """Relative local paths become absolute: every task, whatever its working directory,
    and the memoization cache then see the same artifact root and MLflow store."""
    cwd = cwd or Path.cwd()
    root = cfg.storage.root_uri
    if root.startswith("file://") or "://" not in root:
        root = (cwd / root.removeprefix("file://")).resolve().as_uri()
    uri = cfg.tracking.uri
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = "sqlite:///" + str((cwd / uri.removeprefix("sqlite:///")).resolve())
    return cfg.model_copy(
        update={
            "storage": cfg.storage.model_copy(update={"root_uri": root}),
            "tracking": cfg.tracking.model_copy(update={"uri": uri}),
        }
    )


def run_here(
    pipeline: Pipeline,
    base: PipelineConfig,
    given: PipelineConfig,
    values: dict[str, str],
    args: argparse.Namespace,
) -> int:
    """Run here exactly what ``--submit`` runs: the WorkflowTemplate built from the config
    (``base``: ``-p`` values left out, as its defaults) and a Workflow that refers to it with
    the ``-p`` ``values`` as its arguments; ``given`` is the config with them applied."""
    from flows.local.review.mlflow_page import log_page
    from flows.local.run import run_local  # lazy: --render and --submit never load it

    if args.resume is not None and not (args.resume / "state.json").is_file():
        raise UsageError(
            f"--resume {args.resume}: not a local run (no state.json there); pass the run "
            "directory a local run printed, runs/<workflow name>"
        )
    base, cfg = localize(base), localize(given)
    check_local_source(cfg)
    if args.resume is None:  # a resumed run keeps its own source
        reachable.check_download(cfg)
    revision = git_revision()
    # the memo keys name each step's source: what runs here is this checkout, not an image
    template = pipeline.build_template(base, git_revision=revision, source_keys=True)
    return run_local(
        pipeline.build_submission(base, values, git_revision=revision),
        workflow_templates=[template.to_dict()],
        parameters=values,
        resume=args.resume,
        # the run's page joins its MLflow run once the run ended, then what to do next
        closing=lambda runner, result: [
            *log_page(runner.run_dir),
            *hints.after_run(args, cfg, runner, result),
        ],
        no_cache=args.no_cache,
        refresh=refreshed_tasks(args.refresh),
    )


def refreshed_tasks(steps: list[str]) -> list[str]:
    """The DAG's tasks of the steps ``--refresh`` names (train: either training template's);
    what depends on them follows (flows.local.memo_cache.with_dependents)."""
    tasks = {"train": ["train", MULTINODE]}
    return [task for step in steps for task in tasks.get(step, [step])]


def check_local_source(cfg: PipelineConfig) -> None:
    """A data.source that is a file on this machine must be there before anything runs."""
    source = cfg.data.source
    if source == "cifar10" or source.startswith(("synthetic", "s3://")):
        return
    path = Path(source.removeprefix("file://"))
    if not path.is_file():
        raise UsageError(
            f"data.source {source}: no such file; give the path of cifar-10-python.tar.gz, "
            "or use cifar10 (download) or synthetic[:N] (offline)"
        )
