"""What the whole-pipeline tests share: ``python flows/cifar.py`` run as a user runs it, a
run's state.json, the smoke config made small for the runs whose assertions are about
something other than what optimize, benchmark and the live check measure, and the suite's
shared smoke run (conftest.py's ``smoke_run``: failed, then resumed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.local.servers.mlflow_server import MLflowServer
from flows.local.servers.seaweedfs import SeaweedFS
from tests.helpers.buckets import S3Bucket
from tests.helpers.cifar_files import write_cifar_tarball
from tests.helpers.faulty_builders import extra
from tests.helpers.paths import REPO_ROOT
from tests.helpers.pipeline import pipeline_in, sets

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
# A variant whose builder crashes its build process (SIGSEGV), optional: the step goes on
# (tests/test_local_pipeline.py asserts it, issue 42).
CRASHING = [
    f"optimize.extra_variants=[{extra('segv', 'segfault')}]",
    'optimize.optional_variants=["segv"]',
]


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


@dataclass(frozen=True)
class SmokeRun:
    """What the run left, read by the tests: each command's output, the state after the
    failure (and a copy of the run directory as the failure left it), the run's directory
    and MLflow run, and the arguments it was started with."""

    args: list[str]
    env: dict[str, str]
    cwd: Path
    s3_root: str
    failed: subprocess.CompletedProcess
    failed_state: dict
    failed_status: str  # the MLflow run's, after the failure
    resume: str
    resumed: subprocess.CompletedProcess
    run_dir: Path
    run_id: str
    failed_dir: Path  # runs/<name> as the failure left it, copied before the resume


def smoke_run_in(
    seaweedfs: SeaweedFS, mlflow_server: MLflowServer, root: Path
) -> tuple[SmokeRun, Any]:
    """The smoke pipeline (SMALL) from a tarball whose upload is half done: staging
    fails; then the upload is finished and the run resumed as printed."""
    bucket = S3Bucket(seaweedfs, f"smoke-{root.name.lower()}")
    seaweedfs.client().create_bucket(Bucket=bucket.name)
    pipeline = pipeline_in(bucket, mlflow_server, root)
    tarball = root / "upload" / "cifar-10-python.tar.gz"
    args = [*pipeline.args, *sets([*SMALL, *CRASHING, f"data.source={tarball}", "data.md5=none"])]

    # 1. The upload is not complete yet (half the tarball): staging fails. (A tarball that
    # is not there at all is refused before anything runs.)
    tarball.parent.mkdir()
    write_cifar_tarball(tarball, per_batch=60, seed=3)
    whole = tarball.read_bytes()
    tarball.write_bytes(whole[: len(whole) // 2])
    failed = cifar(args, pipeline.cwd, pipeline.env)
    run_dir = only_run_dir(pipeline.cwd)
    failed_state = state_of(run_dir)
    run_id = failed_state["globals"]["workflow.outputs.parameters.mlflow-run-id"]
    failed_status = pipeline.mlflow.get_run(run_id).info.status
    # the failed run as a run directory of its own (flows/cifar.py get/logs read it)
    failed_dir = root / "failed" / "runs" / run_dir.name
    shutil.copytree(run_dir, failed_dir)

    # 2. Finish the upload and resume, as printed, from a shell without the venv on PATH.
    tarball.write_bytes(whole)
    resume = f"{sys.executable} {REPO_ROOT / 'flows' / 'cifar.py'} --resume runs/{run_dir.name}"
    resumed = subprocess.run(
        ["/bin/sh", "-c", resume],
        cwd=pipeline.cwd,
        env={**pipeline.env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    found = SmokeRun(
        args, pipeline.env, pipeline.cwd, pipeline.s3_root, failed, failed_state,
        failed_status, resume, resumed, run_dir, run_id, failed_dir,
    )  # fmt: skip
    return found, pipeline.mlflow
