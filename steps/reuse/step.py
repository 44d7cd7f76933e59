"""Before the pipeline builds on a memo hit: are the objects it points at still there?

    python -m steps.reuse --step {stage,train,optimize,benchmark} --reused JSON
        [--mlflow-run-id ID] [--outputs-dir DIR] [--config F] [--set k=v ...] [--debug]

Argo hands on a memo entry's outputs as they were saved (v4.0.5 workflow/controller/
operator.go ``executeTemplate``), URIs of objects that may have been deleted since. The
workflow runs this after each hit (flows/pipeline/reuse_templates.py) with the hit's outputs
(``--reused``: ``workflow`` that ran the step, its URI, its MLflow run, a benchmark's
decision). It checks the object each step publishes last; for the benchmark also that the
registry is where its decision left it (the alias on the version it promoted, or still on
the champion it kept; that version not rolled back since), since the decision is about the
registry as it was. Then it writes ``gone``: ``false``, and the reuse of train, optimize or
benchmark goes into this run's MLflow run (``steps.reuse.record``), or ``true``: the
workflow runs the step again. Either way one line says which.
"""

from __future__ import annotations

import argparse
import json
import sys

from steps.common.config import ConfigError, load_config
from steps.common.step_cli import add_common, run_main, write_outputs
from steps.reuse.check import PUBLISHED, ReuseResult, check_reuse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.reuse", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--step", required=True, choices=sorted(PUBLISHED))
    parser.add_argument("--reused", required=True, help="the hit's outputs as a JSON object")
    add_common(parser)
    return parser


def run(args: argparse.Namespace) -> ReuseResult:
    cfg = load_config(args.config, args.overrides)
    result = check_reuse(cfg, args.step, _outputs(args.reused), args.mlflow_run_id)
    print(result.line, file=sys.stderr)
    summary = result.summary()
    write_outputs(args.outputs_dir, {"gone": str(result.gone).lower(), "summary.json": summary})
    return result


def _outputs(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--reused {text[:80]!r}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"--reused {text[:80]!r}: give a JSON object of the step's outputs")
    return {str(k): str(v) for k, v in value.items()}


def main(argv: list[str] | None = None) -> int:
    return run_main("reuse", run, build_parser().parse_args(argv))
