"""Issue 42 item 1: native code in a child process. A builder that segfaults (a real one,
through ctypes), one that aborts, one that hangs past its limit, one that raises: the
optimize step succeeds with the others built, each failure recorded with its signal or its
limit and the crashed thread's innermost frame, in variants.json, the step's log, MLflow
and summary.json; a required variant that crashes fails the step in one line. The
benchmark's first load and run of a variant is guarded the same way: an AOTInductor
package whose library crashes when it loads is listed as failed, the others measured.

The faulty builders (tests/helpers/faulty_builders.py) reach a real run through the config
(``optimize.extra_variants``, a variant made by a builder of your own), so nothing in the
steps reads a test-only variable. ``steps.common.isolation.Worker`` is tested on its own
first: a job in a spawned child, each way of failing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import mlflow
import pytest

from steps.common.contracts.variants import VariantsManifest
from steps.common.isolation import ChildFailed, Worker, innermost_frame
from steps.optimize import step as optimize
from tests.helpers.faulty_builders import extra, job
from tests.helpers.model_bundle import Bundle, bench_args, optimize_args
from tests.helpers.paths import REPO_ROOT

FAULTY = Path(REPO_ROOT / "tests" / "helpers" / "faulty_builders.py")
AT = re.escape(str(FAULTY))
# (builder, cause, signal, the innermost frame's file and function)
FAULTS = [
    ("segfault", "crashed", "SIGSEGV", r'ctypes/__init__\.py", line \d+ in string_at'),
    ("abort", "crashed", "SIGABRT", AT + r'", line \d+ in abort'),
    ("hang", "timed_out", None, AT + r'", line \d+ in hang'),
    ("raises", "raised", None, AT + r'", line \d+ in raises'),
    ("exits", "exited", None, None),
]
LIMIT_S = 20.0  # the hang's limit: well past a tiny model's TorchScript build and gate


@pytest.mark.parametrize(
    ("builder", "cause", "signal", "frame"), FAULTS, ids=[f[0] for f in FAULTS]
)
def test_a_failing_job_costs_that_job_alone(
    tmp_path: Path, builder: str, cause: str, signal: str | None, frame: str | None
) -> None:
    with Worker(None, tmp_path, name="jobs") as worker:
        before = worker.run(job, "answers", LIMIT_S, "build")["pid"]
        with pytest.raises(ChildFailed) as failed:
            worker.run(job, builder, 2.0 if builder == "hang" else LIMIT_S, "build")
        after = worker.run(job, "answers", LIMIT_S, "build")["pid"]
    failure = failed.value.failure
    assert (failure.cause, failure.signal) == (cause, signal)
    assert failure.frame is None if frame is None else re.search(frame, failure.frame)
    assert "\n" not in failure.message
    if cause == "crashed":
        assert failure.message.startswith(f"build: process crashed ({signal}, in File ")
    if cause == "timed_out":
        assert failure.limit_s == 2.0 and "still running after 2 s, stopped" in failure.message
    if cause == "exited":
        assert failure.exit_code == 3
    if cause == "raised":  # the exception's type and first line
        assert failure.message == (
            "build: NotImplementedError: operator aten::faulty not supported by this exporter"
        )
    # the process died with it, except after a Python exception: it goes on there
    assert (after == before) is (cause == "raised")
    assert worker.started == (1 if cause == "raised" else 2)


@pytest.mark.parametrize(("per_process", "started"), [(None, 1), (1, 3)], ids=["shared", "each"])
def test_jobs_per_process(tmp_path: Path, per_process: int | None, started: int) -> None:
    with Worker(None, tmp_path, jobs_per_process=per_process) as worker:
        pids = {worker.run(job, "answers", LIMIT_S, "build")["pid"] for _ in range(3)}
    assert worker.started == len(pids) == started


def test_a_named_set_up_runs_in_the_child_alone(tmp_path: Path) -> None:
    """``module:function`` set-up and jobs are imported in the child, started ahead of the
    first job; a set-up that raises fails that job, and the next one starts afresh."""
    with Worker("tests.helpers.faulty_builders:set_up", tmp_path, setup_arg="answers") as worker:
        worker.start()
        assert worker.run("tests.helpers.faulty_builders:job", "answers", LIMIT_S, "build")["pid"]
        worker.close()
        worker.setup_arg = "raises"
        with pytest.raises(ChildFailed, match=r"^build \(starting its process\): NotImpl"):
            worker.run("tests.helpers.faulty_builders:job", "answers", LIMIT_S, "build")
        worker.setup_arg = "answers"
        assert worker.run("tests.helpers.faulty_builders:job", "answers", LIMIT_S, "build")["pid"]
    assert worker.started == 3


def test_the_steps_own_process_imports_no_builder() -> None:
    """The builders (Inductor, ONNX, OpenVINO, TensorRT) are the build process's imports:
    the step's own process, which only waits for them, is spared them."""
    builders = ["steps.optimize.builders", "steps.optimize.gate", "steps.optimize.build_job",
                "steps.optimize.portable", "torch._inductor.package"]  # fmt: skip
    code = f"import sys, steps.optimize.step\nprint([m for m in {builders} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("dump", "frame"),
    [
        ("Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call "
         'first):\n  File "/a.py", line 3 in crash\n  File "/b.py", line 9 in main\n',
         'File "/a.py", line 3 in crash'),
        ('Thread 0x2 (most recent call first):\n  File "/t.py", line 5 in worker\n\n'
         'Thread 0x1 (most recent call first):\n  File "/m.py", line 7 in wait\n',
         'File "/m.py", line 7 in wait'),
        ("Fatal Python error: Aborted\n\n<no Python frame>\n", None),
    ],
    ids=["the-current-thread", "no-current-thread-the-main-one", "no-frame"],
)  # fmt: skip
def test_the_innermost_frame_of_a_faulthandler_report(dump: str, frame: str | None) -> None:
    assert innermost_frame(dump) == frame


# --- the optimize step ------------------------------------------------------------------
BUILT = ["torchscript", "after"]  # one before the faults, one after them all


@pytest.fixture(scope="module")
def faulty_run(bundle: Bundle, tmp_path_factory, mlflow_server) -> dict:
    """The real optimize step with a faulty extra variant of each kind (optional: the step
    goes on), then one of TorchScript's own builder, tracked in a run of the MLflow server."""
    root = tmp_path_factory.mktemp("faulty-run")
    extras = [extra(name, name) for name, *_ in FAULTS]
    extras.append(
        extra("after", "build_torchscript").replace(
            "tests.helpers.faulty_builders:", "steps.optimize.builders:"
        )
    )
    args = optimize_args(
        bundle.model_uri, bundle.dataset_uri, root / "opt",
        "optimize.variants=[torchscript]", f"optimize.extra_variants=[{', '.join(extras)}]",
        f"optimize.optional_variants={json.dumps([name for name, *_ in FAULTS])}",
        f"optimize.build_timeout_s={LIMIT_S}", outputs_dir=root / "outputs",
    )  # fmt: skip
    client = mlflow.MlflowClient(mlflow_server.uri)
    experiment = client.create_experiment(f"faulty-{root.name}")
    args.mlflow_run_id = client.create_run(experiment).info.run_id
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
        capture = root / "stderr.txt"
        with capture.open("w") as err, pytest.MonkeyPatch.context() as streams:
            streams.setattr(sys, "stderr", err)
            result = optimize.run(args)
    run = client.get_run(args.mlflow_run_id)
    return {"root": root, "result": result, "log": capture.read_text(), "run": run}


def test_the_step_succeeds_with_the_others_built(faulty_run: dict) -> None:
    manifest = faulty_run["result"].manifest
    assert [n for n, e in manifest.variants.items() if e.built] == BUILT
    published = VariantsManifest.parse((faulty_run["root"] / "opt" / "variants.json").read_bytes())
    assert published == manifest
    assert (faulty_run["root"] / "opt" / "after.pt").is_file()
    # a fresh build process after each fault that took one down (segfault, abort, hang, exit)
    assert "(5 build process(es) started)" in faulty_run["log"]


@pytest.mark.parametrize(
    ("builder", "cause", "signal", "frame"), FAULTS, ids=[f[0] for f in FAULTS]
)
def test_each_failure_is_recorded_with_its_cause(
    faulty_run: dict, builder: str, cause: str, signal: str | None, frame: str | None
) -> None:
    entry = faulty_run["result"].manifest.variants[builder]
    assert entry.status == "failed" and entry.optional
    failure = entry.failure
    assert (failure.cause, failure.signal) == (cause, signal)
    assert failure.limit_s == (LIMIT_S if cause == "timed_out" else None)
    assert failure.frame is None if frame is None else re.search(frame, failure.frame)
    assert entry.reason == failure.message
    if signal:
        assert f"process crashed ({signal}, in File " in entry.reason
    # the step's log: its line in the table of variants
    (line,) = [line for line in faulty_run["log"].splitlines() if line.split()[:1] == [builder]]
    assert f"failed   {entry.reason}" in line
    # MLflow: not built, and why
    run = faulty_run["run"]
    assert run.data.metrics[f"optimize/{builder}/built"] == 0.0
    assert run.data.tags[f"optimize.failed.{builder}"] == entry.reason
    summary = json.loads((faulty_run["root"] / "outputs" / "summary.json").read_text())
    assert summary["variants"][builder]["failure"] == cause


def test_a_required_variant_that_crashes_fails_the_step_in_one_line(
    bundle: Bundle, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "steps.optimize", "--model", bundle.model_uri]
    command += ["--dataset", bundle.dataset_uri, "--output", str(tmp_path / "opt")]
    command += ["--set", "optimize.variants=[torchscript]"]
    command += ["--set", f"optimize.extra_variants=[{extra('segv', 'segfault')}]"]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("optimize: error:")]
    assert len(errors) == 1 and re.fullmatch(
        r'optimize: error: build: process crashed \(SIGSEGV, in File ".*", line \d+ in string_at\)',
        errors[0],
    ), done.stderr
    assert "torchscript    fp32  built" in done.stderr
    assert not (tmp_path / "opt" / "variants.json").exists()  # nothing published


# --- the benchmark's first load and run ---------------------------------------------------
CRASH_ON_LOAD = """
#include <signal.h>
__attribute__((constructor)) static void crash_on_load(void) { raise(SIGSEGV); }
"""


def crashing_aoti(package: Path, dest: Path, workdir: Path) -> None:
    """``package`` with its compiled model library replaced by one that crashes when it is
    loaded (a constructor raising SIGSEGV): what a miscompiled AOTInductor package does."""
    source, library = workdir / "crash.c", workdir / "crash.so"
    source.write_text(CRASH_ON_LOAD)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    with zipfile.ZipFile(package) as original, zipfile.ZipFile(dest, "w") as crashing:
        for info in original.infolist():
            data = library.read_bytes() if info.filename.endswith(".so") else original.read(info)
            crashing.writestr(info, data)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a crashing library")
def test_a_variant_that_crashes_when_the_benchmark_loads_it_costs_that_variant(
    bundle: Bundle, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from steps.benchmark import step as benchmark

    opt = tmp_path / "opt"
    shutil.copytree(bundle.root / "opt", opt)
    manifest = VariantsManifest.parse((opt / "variants.json").read_bytes())
    crashing_aoti(bundle.root / "opt" / "aoti.pt2", opt / "aoti.pt2", tmp_path)
    kept = {n: manifest.variants[n] for n in ("torchscript", "aoti")}
    (opt / "variants.json").write_bytes(replace(manifest, variants=kept).dumps())
    args = bench_args(bundle.model_uri, opt.as_uri(), bundle.dataset_uri, tmp_path / "r",
                      "tracking.enabled=false", "benchmark.rounds=1")  # fmt: skip
    result = benchmark.run(args)
    report = result.report
    assert set(report.measured) == {"eager", "torchscript"}
    aoti = report.not_measured["aoti"]
    assert aoti.status == "failed" and aoti.failure.signal == "SIGSEGV"
    assert aoti.reason.startswith("first load and run: process crashed (SIGSEGV, in File ")
    # the innermost Python frame: torch's package loader, where the library was opened
    assert re.search(r'/torch/.*", line \d+ in _?load\w*\)$', aoti.reason), aoti.reason
    published = json.loads((tmp_path / "r" / "benchmark.json").read_text())
    assert published["variants"]["aoti"]["failure"]["signal"] == "SIGSEGV"
    assert f"- aoti: failed: {aoti.reason}" in (tmp_path / "r" / "report.md").read_text()
    assert "aoti           failed: first load and run" in capsys.readouterr().err
