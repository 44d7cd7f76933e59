"""The command-line conventions every step shares: common options, output files, exit codes.

Exit codes: 0 done; 2 a user error (bad config, a URI that does not hold what it should);
1 a runtime failure (storage, tracking, a failed gate, a crash); a step may add its own
(training's test-only stop: 3). One line on stderr, the traceback only with ``--debug``.
Output parameters are small files in ``--outputs-dir`` (default ``$CIFAR_OUTPUTS_DIR``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from steps.common.config import ConfigError, PipelineConfig, TrackingConfig
from steps.common.config.fields import UriError
from steps.common.contracts import ContractError
from steps.common.dataset import NotADataset
from steps.common.storage import LocalStore

# This module stays torch-free: the data image's staging step uses it too.
OUTPUTS_ENV = "CIFAR_OUTPUTS_DIR"
# Mistakes in what the user passed, the same in every step: exit 2 (a document that does
# not fit its contract: the step that wrote it, or a hand that changed it, is to fix).
USER_ERRORS: tuple[type[Exception], ...] = (ConfigError, UriError, NotADataset, ContractError)


def add_common(
    parser: argparse.ArgumentParser, *, outputs: bool = True, mlflow_run: bool = True
) -> None:
    """``--config``, ``--set`` and ``--debug``; ``--outputs-dir`` for a step with output
    parameters; ``--mlflow-run-id`` for a step that logs into the pipeline's run."""
    parser.add_argument("--config", help="pipeline config YAML (default: configs/local.yaml)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE"
    )
    if mlflow_run:
        parser.add_argument(
            "--mlflow-run-id",
            default=os.environ.get("MLFLOW_RUN_ID") or None,
            help="join the pipeline's MLflow run (default: $MLFLOW_RUN_ID, else a run of its own)",
        )
    if outputs:
        parser.add_argument(
            "--outputs-dir",
            type=Path,
            default=os.environ.get(OUTPUTS_ENV),
            help=f"write the step's output parameters here (default: ${OUTPUTS_ENV})",
        )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")


def tracking_wanted(cfg: PipelineConfig, run_id: str | None) -> bool:
    """Log to MLflow only when asked: a run id, MLFLOW_TRACKING_URI, or a tracking.uri set
    away from the default; and never with ``tracking.enabled=false``."""
    if not cfg.tracking.enabled:
        return False
    explicit_uri = cfg.tracking.uri != TrackingConfig().uri
    return bool(run_id or os.environ.get("MLFLOW_TRACKING_URI") or explicit_uri)


def seconds_since_launch() -> float | None:
    """Seconds since this step's process started: the interpreter and the imports before
    the step's own code ran (under torchrun, since the launcher started: its start-up, the
    ranks' and the rendezvous too). A pod pays them as well, so they are the step's time,
    reported apart as ``startup_seconds``. None where there is no /proc (not Linux).

    Read from /proc, not psutil: psutil's ``create_time`` adds a boot time rounded to whole
    seconds, too coarse for a start-up of one or two."""
    pid = os.getpid()
    if os.environ.get("TORCHELASTIC_RUN_ID"):  # a rank started by torchrun: time the launcher
        pid = os.getppid()
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime (after comm)
        return round(time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def startup_seconds(busy: float) -> float | None:
    """The start-up that came before a step's ``busy`` seconds of work, as a step reports it
    at its end (see ``seconds_since_launch``)."""
    since = seconds_since_launch()
    return None if since is None else round(max(0.0, since - busy), 3)


def step_seconds(started: float) -> dict[str, float | None]:
    """A step's summary.json times: ``seconds`` of work since ``started`` (a perf_counter
    reading) and the ``startup_seconds`` before it."""
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 3), "startup_seconds": startup_seconds(seconds)}


def exit_process(code: int) -> NoReturn:
    """``sys.exit(code)`` for a step's ``__main__``, leaving the objects made so far out of
    the interpreter's last garbage collections. Those walk everything torch, MLflow and
    matplotlib allocated: 0.7 s at the exit of a bare ``import torch`` here, 2.6 s for the
    benchmark step, paid by every pod for nothing. atexit handlers and plain deallocation
    still run; only cyclic garbage made before this point is not collected at exit."""
    gc.freeze()
    sys.exit(code)


def write_outputs(directory: Path | None, values: dict[str, Any]) -> None:
    """One small file per output parameter (dicts as JSON), each written atomically."""
    if directory is None:
        return
    store = LocalStore(directory)
    for name, value in values.items():
        text = json.dumps(value, indent=2) if isinstance(value, (dict, list)) else str(value)
        store.write_bytes(name, text.encode())


def run_main(
    prog: str,
    run: Callable[[argparse.Namespace], Any],
    args: argparse.Namespace,
    user_errors: tuple[type[Exception], ...] = (),
    exit_codes: Mapping[type[Exception], int] | None = None,
) -> int:
    """Run a step; a failure is ``prog: error: <one line>`` on stderr and its exit code (see
    above). ``USER_ERRORS`` and a step's own ``user_errors`` exit 2; ``exit_codes`` gives a
    step's own exceptions codes of their own."""
    try:
        result = run(args)
    except Exception as exc:
        if args.debug:
            raise
        special = [code for kind, code in (exit_codes or {}).items() if isinstance(exc, kind)]
        code = special[0] if special else 2 if isinstance(exc, USER_ERRORS + user_errors) else 1
        lines = str(exc).strip().splitlines()
        text = lines[0] if lines else ""
        if not type(exc).__module__.startswith("steps."):  # a crash: name its type
            text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        # One write of the whole line: print() writes text and newline separately, and two
        # torchrun ranks failing together then interleave on the shared stderr pipe.
        sys.stderr.write(f"{prog}: error: {text}\n")
        sys.stderr.flush()
        return code
    return getattr(result, "exit_code", 0)  # predict: 2 when some inputs were bad
