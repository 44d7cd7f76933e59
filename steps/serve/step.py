"""Serve the champion over HTTP: MLflow's scoring protocol and the Open Inference Protocol
(KServe's v2, binary tensors included), KServe's health probes, dynamic batching.

    python -m steps.serve --model-uri URI [--host 127.0.0.1] [--port P] [--config F]
        [--set serving.max_batch=64 ...] [--debug]

URI: anything ``mlflow.pyfunc.load_model`` takes (``models:/cifar10-classifier@champion``,
``models:/NAME/VERSION``, ``runs:/<run>/served``, a directory); the champion pyfunc that
``steps.benchmark`` logs. Port: ``--port``, else ``$PORT``, else ``serving.port`` (0: any
free port, printed). The model's files are fetched first (a URI that holds no model exits 2
before any port is taken); then the port is bound, one line says where
(``serving URI on http://HOST:PORT (POST /invocations)``, then curl lines for both
protocols) and the model loads while
/v2/health/live already answers and the readiness probes answer 503. SIGINT, SIGTERM or
SIGHUP stop it after the requests in flight (exit 0); a model that fails to load exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys

from steps.common.config import PipelineConfig, load_config
from steps.common.step_cli import add_common, run_main
from steps.serve.server import ServeResult, ServeUsageError, serve_model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.serve", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model-uri", required=True, help="the pyfunc to serve (MLflow URI)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (image: 0.0.0.0)")
    parser.add_argument(
        "--port", type=int, default=None, help="port (default: $PORT, else serving.port; 0: any)"
    )
    add_common(parser, outputs=False, mlflow_run=False)
    return parser


def pick_port(args: argparse.Namespace, cfg: PipelineConfig) -> int:
    if args.port is not None:
        return args.port
    text = os.environ.get("PORT", "")
    if text:
        if not text.isdigit() or int(text) > 65535:
            raise ServeUsageError(f"PORT={text!r} is not a port number (0..65535)")
        return int(text)
    return cfg.serving.port


def run(args: argparse.Namespace) -> ServeResult:
    cfg = load_config(args.config, args.overrides)
    return serve_model(args.model_uri, args.host, pick_port(args, cfg), cfg)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main("steps.serve", run, args, user_errors=(ServeUsageError,))


if __name__ == "__main__":
    sys.exit(main())
