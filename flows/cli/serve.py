"""``python flows/cifar.py serve [--model URI]``: the champion served here, in the
foreground, by ``python -m steps.serve`` (the InferenceService's command) in a child
process; Ctrl-C, SIGTERM or SIGHUP stop it gracefully."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from flows.cli import hints
from flows.cli.here import localize
from flows.errors import UsageError
from steps.common.config import REPO_ROOT, ConfigError, PipelineConfig, load_config


def build_serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python flows/cifar.py serve",
        description="Serve the champion here, in the foreground (python -m steps.serve); "
        "Ctrl-C stops it.",
    )
    parser.add_argument(
        "--model",
        help="MODEL_URI to serve (default: models:/<benchmark.registered_model>@<benchmark.alias>)",
    )
    parser.add_argument("--config", help="config YAML (default: configs/local.yaml)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, help="port (default: serving.port; 0: any free one)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def serve_command(args: argparse.Namespace, cfg: PipelineConfig) -> tuple[list[str], dict]:
    """The server's command line and environment: the champion of the config's registry
    (``MLFLOW_TRACKING_URI``, else ``tracking.uri`` made absolute as a local run makes it)
    unless ``--model`` names another; this checkout's steps."""
    cfg = localize(cfg)
    model = args.model or f"models:/{cfg.benchmark.registered_model}@{cfg.benchmark.alias}"
    argv = [sys.executable, "-m", "steps.serve", "--model-uri", model, "--host", args.host]
    if args.port is not None:
        argv += ["--port", str(args.port)]
    if args.config:
        argv += ["--config", str(Path(args.config).resolve())]
    for override in args.overrides:
        argv += ["--set", override]
    if args.debug:
        argv.append("--debug")
    env = dict(os.environ)
    env.setdefault("MLFLOW_TRACKING_URI", cfg.tracking.uri)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return argv, env


def serve(argv: list[str]) -> int:
    """``python flows/cifar.py serve``: the server in the foreground, its exit code."""
    args = build_serve_parser().parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        command, env = serve_command(args, cfg)
        missing = None if args.model else hints.missing_champion(localize(cfg), args)
        if missing:
            raise UsageError(missing)
    except (ConfigError, UsageError) as exc:
        if args.debug:
            raise
        print(f"cifar: error: {exc}", file=sys.stderr)
        return 2
    process = subprocess.Popen(command, env=env)

    def stop(signum: int, frame: object) -> None:
        # A terminal's Ctrl-C reaches both processes, a kill only this one: the server gets
        # SIGTERM (a second SIGINT would make uvicorn skip its graceful shutdown).
        process.send_signal(signal.SIGTERM)

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, stop) for sig in stops}
    try:
        return process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
