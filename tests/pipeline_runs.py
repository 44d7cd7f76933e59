"""What the whole-pipeline tests share: ``python flows/cifar.py`` run as a user runs it, a
run's state.json, and the smoke config made small for the runs whose assertions are about
something other than what optimize, benchmark and the live check measure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SMOKE = REPO_ROOT / "configs" / "smoke.yaml"
# After training, the smoke config made small: one portable optimize variant (the
# registered model is still the serving pyfunc), one batch size, one benchmark round.
SMALL_AFTER_TRAIN = [
    "optimize.variants=[onnx]",
    "optimize.int8=false",
    "benchmark.batch_sizes=[8]",
    "benchmark.rounds=1",
]
# The whole smoke config made small: one epoch too, and one check concurrency. For the
# runs that assert the pipeline's wiring (a launcher, a rollback, a memo hit), not the
# model's accuracy nor every variant's numbers: 34 s where the smoke run took 86 s here.
SMALL = ["train.epochs=1", *SMALL_AFTER_TRAIN, "serving.check_concurrency=[1]"]


def sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def cifar(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python flows/cifar.py ARGS`` in ``cwd``, its output captured."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "flows" / "cifar.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def state_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "state.json").read_text())


def only_run_dir(cwd: Path, exclude: set[Path] = frozenset()) -> Path:
    dirs = [p for p in (cwd / "runs").iterdir() if p not in exclude]
    assert len(dirs) == 1, dirs
    return dirs[0]
