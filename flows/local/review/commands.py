"""``python flows/cifar.py list | get RUN | logs RUN [TASK] | ui``: local runs reviewed as
the argo CLI reviews a cluster's (its flags where they apply). A run that is not there is
a user error: one line naming the nearest runs, exit 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from flows.local.review.argo_workflow import workflow_status
from flows.local.review.get import print_workflow
from flows.local.review.listing import print_workflows, select, workflows
from flows.local.review.logs import print_logs
from flows.local.review.runs import RUNS_DIR, ReviewError, find_run, load_state
from flows.local.review.server import DEFAULT_PORT, ReviewServer

PROG = "python flows/cifar.py"


def _runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs-dir", type=Path, default=RUNS_DIR, help="where the runs are (default: runs)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Review local runs as the argo CLI reviews workflows."
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="the runs, newest first (argo list)")
    listing.add_argument("--running", action="store_true", help="runs still going")
    listing.add_argument("--completed", action="store_true", help="runs that ended")
    listing.add_argument("--status", action="append", default=[], help="phases, comma separated")
    listing.add_argument("--prefix", default="", help="names that start with it")
    listing.add_argument("-o", "--output", choices=["name", "json", "wide"], default="")
    listing.add_argument("--no-headers", action="store_true", help="no header line")
    _runs_dir(listing)
    get = verbs.add_parser("get", help="a run's node tree (argo get)")
    get.add_argument("run", metavar="RUN", help="a run's name or directory")
    get.add_argument("-o", "--output", choices=["json", "yaml", "wide", "short"], default="")
    _runs_dir(get)
    logs = verbs.add_parser("logs", help="a run's task logs (argo logs)")
    logs.add_argument("run", metavar="RUN", help="a run's name or directory")
    logs.add_argument("task", metavar="TASK", nargs="?", help="one task (default: all)")
    logs.add_argument("-f", "--follow", action="store_true", help="follow a running run")
    logs.add_argument("--tail", type=int, default=-1, help="the last N lines of each log")
    logs.add_argument("--grep", default="", help="only lines matching this expression")
    logs.add_argument("--no-color", action="store_true", help="no colours")
    _runs_dir(logs)
    ui = verbs.add_parser("ui", help="serve the runs' pages on 127.0.0.1 (read-only)")
    ui.add_argument("--port", type=int, default=DEFAULT_PORT, help="default 2746 (argo server's)")
    _runs_dir(ui)
    return parser


def on_terminal() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb" and "NO_COLOR" not in os.environ


def run(args: argparse.Namespace) -> int:
    if args.verb == "list":
        if args.running and args.completed:
            raise ReviewError("--completed and --running cannot be used together")
        statuses = [s for given in args.status for s in given.split(",") if s]
        found = select(
            workflows(args.runs_dir), args.running, args.completed, statuses, args.prefix
        )
        sys.stdout.write(print_workflows(found, args.output, args.no_headers))
    elif args.verb == "get":
        workflow = workflow_status(load_state(find_run(args.run, args.runs_dir)))
        if args.output == "json":
            sys.stdout.write(json.dumps(workflow, indent=2) + "\n")
        elif args.output == "yaml":
            sys.stdout.write(yaml.safe_dump(workflow, sort_keys=False))
        else:
            sys.stdout.write(print_workflow(workflow, args.output, on_terminal()))
    elif args.verb == "logs":
        colour = on_terminal() and not args.no_color
        run_dir = find_run(args.run, args.runs_dir)
        print_logs(run_dir, args.task, args.follow, args.tail, args.grep, colour, _line)
    else:
        return serve(args.runs_dir, args.port)
    return 0


def _line(text: str) -> None:
    print(text, flush=True)


def serve(runs_dir: Path, port: int) -> int:
    try:
        server = ReviewServer(runs_dir, port)
    except OSError as exc:
        print(f"cifar: error: 127.0.0.1:{port}: {exc.strerror}; pass --port", file=sys.stderr)
        return 1
    print(f"Serving {runs_dir}/ read-only at {server.url} (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def main(argv: list[str]) -> int:
    """``argv``: the verb and its arguments."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ReviewError as exc:
        print(f"cifar: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # | head
        return 0
    except KeyboardInterrupt:
        return 130
