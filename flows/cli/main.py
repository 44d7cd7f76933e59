"""``python flows/cifar.py``: one command line for every way the pipeline runs.

A user error (a bad option combination, config value or server answer to fix) prints one
line; config and usage errors exit 2, a server that refuses or fails exits 1; ``--debug``
shows the traceback instead. The pipeline's builders are handed in by flows/cifar.py's
``__main__`` block (``builders.Pipeline``): the command line never imports the file that
calls it. ``serve`` is flows/cli/serve.py's; ``list``, ``get``, ``logs`` and ``ui`` are
the local runner's review (flows/local/review/commands.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from flows.argo import connection, resubmit, submit
from flows.cli.builders import Pipeline
from flows.cli.here import run_here
from flows.cli.serve import serve
from flows.errors import FlowError, SubmitError, UsageError
from flows.local.review import VERBS as REVIEW_VERBS
from flows.manifests import trainjob
from flows.manifests.names import labels
from flows.pipeline import parameters
from flows.pipeline.memo_keys import STEPS
from steps.common.config import ConfigError, PipelineConfig, load_config, with_overrides
from steps.common.version import git_revision

MEMOIZED = list(STEPS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python flows/cifar.py",
        description="CIFAR-10 pipeline: run here (no mode flag), --render, or --submit; "
        "`serve [--model URI]` serves the champion here; `list`, `get RUN`, `logs RUN "
        "[TASK] [-f]` and `ui` review local runs as the argo CLI and UI do.",
        epilog="Argo server: cluster.argo_host, else ARGO_SERVER (host:port; ARGO_SECURE=false "
        "for http) or ARGO_HOST (a URL); token: ARGO_TOKEN; namespace: cluster.namespace when "
        "the config names it, else ARGO_NAMESPACE; ARGO_INSECURE_SKIP_VERIFY=true skips TLS "
        "verification. MLflow: tracking.uri, else MLFLOW_TRACKING_URI.",
    )
    parser.add_argument("--config", help="config YAML (default: configs/local.yaml)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one config field (repeatable)",
    )
    parser.add_argument(
        "-p",
        "--parameter",
        dest="parameters",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a workflow parameter, as argo submit -p (repeatable): "
        + ", ".join(p.name for p in parameters.PARAMETERS),
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--render", action="store_true", help="print the Argo YAML")
    mode.add_argument("--submit", action="store_true", help="submit to the Argo server")
    mode.add_argument(
        "--resubmit",
        metavar="WORKFLOW",
        help="a failed cluster run again: a new Workflow of the current WorkflowTemplate with "
        "its parameters, reusing every step whose memo key did not change",
    )
    mode.add_argument(
        "--render-runtime",
        action="store_true",
        help="print the ClusterTrainingRuntime a TrainJob runs on (train.launcher=trainjob)",
    )
    parser.add_argument("--cron", action="store_true", help="the CronWorkflow (schedule.*)")
    parser.add_argument("--wait", action="store_true", help="follow a submitted workflow")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="--resubmit: print what would be reused, submit nothing",
    )
    parser.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a local run")
    parser.add_argument(
        "--no-cache", action="store_true", help="a local run reuses no memoized step"
    )
    parser.add_argument(
        "--refresh",
        action="append",
        default=[],
        choices=MEMOIZED,
        metavar="STEP",
        help="a local run runs STEP and what depends on it, reused or not (repeatable): "
        + ", ".join(MEMOIZED),
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def check_options(args: argparse.Namespace) -> None:
    if args.render_runtime and (args.cron or args.wait or args.resume):
        raise UsageError("--render-runtime prints one manifest: drop --cron/--wait/--resume")
    if args.cron and not (args.render or args.submit):
        raise UsageError("--cron goes with --render or --submit")
    if args.wait and not (args.submit or args.resubmit):
        raise UsageError("--wait follows a submitted workflow: add --submit")
    if args.dry_run and not args.resubmit:
        raise UsageError("--dry-run prints the plan of --resubmit WORKFLOW: add it")
    if args.resubmit and (args.parameters or args.cron or args.resume):
        raise UsageError(
            "--resubmit carries the failed run's parameters: drop -p/--cron/--resume (a new "
            "run with other parameters: --submit -p)"
        )
    if args.wait and args.cron:
        raise UsageError("--wait follows one workflow; a CronWorkflow starts one per schedule")
    if args.resume and (args.render or args.submit):
        raise UsageError("--resume continues a local run: drop --render/--submit")
    if (args.no_cache or args.refresh) and (args.render or args.submit or args.render_runtime):
        raise UsageError(
            "--no-cache and --refresh choose what a local run reuses: drop them with "
            "--render/--submit (a cluster run reuses by its memo keys, docs/cluster.md)"
        )
    if args.resume and (args.config or args.overrides or args.parameters):
        raise UsageError(
            "--resume continues a run with the config and parameters it started with: drop "
            "--config/--set/-p, or start a new run with them (without --resume)"
        )


def run(args: argparse.Namespace, pipeline: Pipeline) -> int:
    check_options(args)
    values = parameters.parse(args.parameters)
    # -p values are checked as the config fields they stand for; the template keeps the
    # config's values as defaults, the run gets the given ones
    base = connection.resolve_config(load_config(args.config, args.overrides), os.environ)
    given = with_overrides(base, parameters.as_overrides(values), args.config)
    given.processes_per_node()  # the run's processes must fit its GPUs, whatever the template's
    if args.render_runtime:
        applied = {k: v for k, v in labels(base).items() if k != "app.kubernetes.io/managed-by"}
        runtime = trainjob.build_runtime(base, applied)  # applied by kustomize, not Hera
        sys.stdout.write(yaml.safe_dump(trainjob.to_manifest(runtime), sort_keys=False))
        return 0
    if not (args.render or args.submit or args.resubmit):
        return run_here(pipeline, base, given, values, args)
    revision = git_revision()
    if args.resubmit:
        return resubmit_run(pipeline, base, args, revision)
    template = pipeline.build_template(base, git_revision=revision)
    build = pipeline.build_cron_workflow if args.cron else pipeline.build_submission
    workflow = build(base, values, git_revision=revision)
    if args.render:
        sys.stdout.write(pipeline.render(template, workflow))
        return 0
    target = connection.preflight(given, os.environ)
    submit.apply_template(template, target)
    if args.cron:
        return submit.submit_cron(workflow, base, target)  # type: ignore[arg-type]
    return submit.submit_workflow(workflow, base, target, wait=args.wait)


def resubmit_run(
    pipeline: Pipeline, cfg: PipelineConfig, args: argparse.Namespace, revision: str | None
) -> int:
    """``--resubmit WORKFLOW [--dry-run] [--wait]``: the failed run's plan, then (unless
    ``--dry-run``) the current template applied and a run of it submitted
    (flows/argo/resubmit.py)."""
    target = connection.preflight(cfg, os.environ)
    return resubmit.resubmit(
        pipeline.build_template(cfg, git_revision=revision),
        lambda values: pipeline.build_submission(cfg, values, git_revision=revision),
        target,
        args.resubmit,
        dry_run=args.dry_run,
        apply=lambda template: submit.apply_template(template, target),
        submit=lambda workflow: submit.submit_workflow(workflow, cfg, target, wait=args.wait),
    )


def main(argv: list[str], pipeline: Pipeline) -> int:
    """The command line ``argv`` (without the program) over ``pipeline``'s builders."""
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    if argv[:1] and argv[0] in REVIEW_VERBS:  # list, get, logs, ui: local runs reviewed
        from flows.local.review.commands import main as review  # lazy, as the local run

        return review(argv)
    args = build_parser().parse_args(argv)
    try:
        return run(args, pipeline)
    except (UsageError, ConfigError, FlowError) as exc:
        if args.debug:
            raise
        print(
            f"cifar: error: {parameters.in_user_terms(str(exc), args.parameters)}", file=sys.stderr
        )
        return 2
    except SubmitError as exc:
        if args.debug:
            raise
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("cifar: interrupted; a submitted workflow keeps running in Argo", file=sys.stderr)
        return 130
