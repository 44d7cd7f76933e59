"""The training step run for the tests: under torchrun with N ranks (``launch``) or in
this process (``train_in_process``), on the small learnable synthetic dataset, with the
configs the tests train (``SIMPLE``, ``TINY_RESNET``); read by tests/test_train.py and
tests/test_train_ddp.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from steps.train.step import build_parser, run
from tests.helpers.paths import REPO_ROOT

TRAIN_IMAGES = 1500
SIMPLE = [
    "train.model=simplecnn",
    "train.epochs=3",
    "train.batch_size=64",
    "train.lr=0.05",
    "train.warmup_epochs=0.5",
    "tracking.enabled=false",
]
TINY_RESNET = [  # BatchNorm buffers too: the ranks must agree on those as well
    "train.model=resnet9",
    "train.width=8",
    "train.epochs=3",
    "train.batch_size=64",
    "train.lr=0.1",
    "train.warmup_epochs=0.5",
    "tracking.experiment=test-train",
]
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def launch(
    nproc: int, dataset: str, output: Path | str, overrides: list[str], *extra: str, env=None
) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node N -m steps.train`` (N=0: plain ``python -m``)."""
    launcher = (
        [TORCHRUN, "--standalone", f"--nproc-per-node={nproc}"] if nproc else [sys.executable]
    )
    argv = ["-m", "steps.train", "--dataset", dataset, "--output", str(output), *sets(overrides)]
    return subprocess.run(
        [*launcher, *argv, *extra],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=240,
    )


def train_in_process(dataset: str, output: Path | str, overrides: list[str], hooks=None):
    """``run(args, hooks)`` in this process: one rank, no torchrun environment."""
    argv = ["--dataset", dataset, "--output", str(output), *sets(overrides)]
    return run(build_parser().parse_args(argv), hooks)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error:" in line]
