"""The commands for a bare GPU machine, ``benchmarks/gpu.py`` and
``benchmarks/aoti_diagnose.py``: their CPU dry runs end to end with the packages such a
machine lacks made unimportable, gpu.py's settings held to the trainer's defaults, its
synthetic data and its time budget, and the child processes both run each piece in (a
real segfault, an abort, a hang past its limit, a failure: each costs its piece only)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from benchmarks import gpu
from benchmarks.gpu_child import Outcome, run_child
from benchmarks.gpu_inference import InferenceRow
from benchmarks.learnable_data import learnable_cifar
from steps.common.config import TrainConfig
from tests.helpers.paths import REPO_ROOT

# What the GPU machines this project borrows do not have (the device's KINDS.md): every
# finder is told to find none of them, so importing one fails as it would there and
# ``importlib.util.find_spec`` answers None.
ABSENT_THERE = ("pydantic", "mlflow", "boto3", "botocore", "openvino", "torch_tensorrt")
BLOCKER = f"""
import runpy, sys
class Absent:
    def __init__(self, finder):
        self.finder = finder
    def __getattr__(self, name):
        return getattr(self.finder, name)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {ABSENT_THERE!r}:
            return None
        return self.finder.find_spec(name, path, target)
sys.meta_path[:] = [Absent(finder) for finder in sys.meta_path]
script = sys.argv[1]
sys.argv = [script, *sys.argv[2:]]
runpy.run_path(script, run_name="__main__")
"""


# The dry run starts a process a loop and a variant (9 on the CPU), each importing torch:
# 550 s on this 2-core machine at a load of 10, past pytest's 600 s when busier.
DRY_RUN_TIMEOUT_S = 1200


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    args = ["benchmarks/gpu.py", "--device", "cpu", "--quick", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=DRY_RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.timeout(DRY_RUN_TIMEOUT_S)
def test_the_dry_run_trains_every_loop_and_times_every_variant(dry_run) -> None:
    _, report = dry_run
    loops = [row["loop"] for row in report["training"]]
    assert loops[0].startswith("seed loop") and len(loops) == 4, loops
    assert [loop.split("torch.compile")[1] for loop in loops if "torch.compile" in loop] == [
        ", caches cold"
    ]
    for row in report["training"]:
        assert row["epoch_s"] and all(s > 0 for s in row["epoch_s"]), row
        assert len(row["accuracy"]) == len(row["epoch_s"])
        assert row["host_syncs"] is None  # counted on CUDA only
    # The trainer learns the synthetic data: ResNet-9 ends well above chance (0.1).
    for resnet in (row for row in report["training"] if "ResNet-9" in row["loop"]):
        assert resnet["accuracy"][-1] > 0.5, resnet  # 0.84 here, eager and compiled

    variants = {row["variant"]: row for row in report["inference"]}
    assert list(variants) == [
        "eager fp32",
        "eager bf16",
        "torch.compile bf16",
        "AOTInductor bf16",
        "AOTInductor fp32",
    ]
    for row in variants.values():
        assert set(row["p50_ms"]) == {"1", "8"} and all(ms > 0 for ms in row["p50_ms"].values())
    assert variants["eager fp32"]["max_abs_diff"] == 0.0
    assert variants["AOTInductor fp32"]["max_abs_diff"] < 1e-3  # BatchNorm folded: rounding
    assert variants["AOTInductor fp32"]["top1_agreement"] == 1.0
    assert variants["AOTInductor bf16"]["max_abs_diff"] < 0.25
    # Each loop and variant ran in a child process of its own, and each says how it ended.
    outcomes = dict(map(tuple, report["outcomes"]))
    assert [outcomes[loop] for loop in loops] == ["trained"] * len(loops)
    for name, row in variants.items():
        assert re.fullmatch(r"built in \d+\.\d s; timed", outcomes[name]), outcomes
        assert f"built in {row['build_s']:.1f} s" in outcomes[name]
    warm = "ours: ResNet-9, as above + torch.compile, caches warm (a new process)"
    reduce_overhead = "ours: ResNet-9, as above + torch.compile reduce-overhead (CUDA graphs)"
    assert report["not_run"] == [
        [warm, "--quick: the code of the loop before it, run again"],
        [reduce_overhead, "needs CUDA"],
        ["TensorRT fp16", "needs CUDA"],
    ]


@pytest.mark.slow
@pytest.mark.timeout(DRY_RUN_TIMEOUT_S)
def test_the_dry_run_prints_the_tables_it_saved(dry_run, tmp_path) -> None:
    done, report = dry_run
    assert done.stdout.startswith("CPU ")
    for heading in ("Training to 90% test accuracy", "Inference, the trained ResNet-9", "Not run"):
        assert heading in done.stdout
    for row in report["training"] + report["inference"]:
        assert (row.get("loop") or row["variant"]) in done.stdout
    assert "| TensorRT fp16 | needs CUDA |" in done.stdout
    assert "| AOTInductor fp32 | built in " in done.stdout


def test_its_settings_are_the_trainers_defaults() -> None:
    """gpu.py cannot import the config model (pydantic); its copy of the defaults must not
    drift from it. Only the sizes a quick run shrinks differ, and only when asked."""
    defaults = TrainConfig()
    for setting in dataclasses.fields(gpu.TrainSettings):
        assert getattr(gpu.TrainSettings(), setting.name) == getattr(defaults, setting.name), (
            setting.name
        )
    scale = gpu.Scale()
    assert (scale.epochs, scale.batch_size, scale.width) == (
        defaults.epochs,
        defaults.batch_size,
        defaults.width,
    )


def test_the_learnable_data_is_cifar_shaped_and_the_same_for_a_seed() -> None:
    one = learnable_cifar(300, 100, torch.device("cpu"), seed=3)
    again = learnable_cifar(300, 100, torch.device("cpu"), seed=3)
    other = learnable_cifar(300, 100, torch.device("cpu"), seed=4)
    assert one.train_images.shape == (300, 32, 32, 3) and one.train_images.dtype == torch.uint8
    assert one.test_images.shape == (100, 32, 32, 3) and one.test_labels.dtype == torch.int64
    assert torch.equal(one.train_images, again.train_images)
    assert torch.equal(one.test_labels, again.test_labels)
    assert not torch.equal(one.train_images, other.train_images)
    assert set(one.train_labels.tolist()) == set(range(10)) and len(one.classes) == 10
    # Images of a class share a pattern: their mean is closer to their class's mean image
    # than to another class's (what makes the data learnable, unlike random pixels).
    images, labels = one.train_images.float(), one.train_labels
    means = torch.stack([images[labels == k].mean(0) for k in range(10)])
    distance = torch.cdist(images.flatten(1), means.flatten(1))
    assert (distance.argmin(1) == labels).float().mean() > 0.5


def test_an_empty_budget_runs_only_the_seed_loop_and_says_why(capsys, tmp_path) -> None:
    out = tmp_path / "gpu.json"
    argv = ["--device", "cpu", "--quick", "--budget-s", "0", "--seed-s", "0.1", "--json", str(out)]
    assert gpu.main(argv) == 0
    report = json.loads(out.read_text())
    assert [row["loop"] for row in report["training"]] == [gpu.SEED_LOOP]
    skipped = dict(map(tuple, report["not_run"]))
    assert len(skipped) == 6, skipped
    by_reason = {what: why for what, why in skipped.items() if not why.startswith("time budget")}
    assert sorted(by_reason.values()) == [
        "--quick: the code of the loop before it, run again", "needs CUDA",
        "no ResNet-9 was trained",
    ]  # fmt: skip
    assert skipped["inference"] == "no ResNet-9 was trained"
    ours = [what for what in skipped if "ours" in what and what not in by_reason]
    assert len(ours) == 3 and all(skipped[what].startswith("time budget") for what in ours)
    assert report["outcomes"] == [[gpu.SEED_LOOP, "trained"]]
    assert out.with_suffix(".md").read_text().strip() == capsys.readouterr().out.strip()


def test_cuda_asked_for_where_there_is_none_is_refused(capsys, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main(["--device", "cuda"]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err


# --- each piece in a child process of its own ---------------------------------------------
SEGFAULT = """import ctypes, threading, time; threading.Thread(target=time.sleep, args=(9,)).start()
print("STAGE build", flush=True); ctypes.string_at(0)"""
HANG = """import subprocess, sys, time
grandchild = subprocess.Popen(["sleep", "60"])  # a compile worker, say
print(grandchild.pid, flush=True); print("STAGE build", flush=True); time.sleep(60)"""


@pytest.mark.parametrize(
    ("code", "status", "stage", "detail"),
    [
        # A real segfault with a second thread asleep: the crashed thread's frame is named.
        (SEGFAULT, "crashed", "build",
         r'SIGSEGV, in File ".*ctypes.*", line \d+ in string_at'),
        ("import os; print('STAGE timing', flush=True); os.abort()", "crashed", "timing",
         r"SIGABRT(, in .*)?"),
        ("import sys; print('STAGE build'); sys.exit('InductorError: no C++ compiler')",
         "failed", "build", r"exit 1: InductorError: no C\+\+ compiler"),
        ("print('STAGE build'); print('STAGE timing')", "finished", "timing", r""),
    ],
    ids=["segfault", "abort", "error", "finished"],
)  # fmt: skip
def test_a_child_says_how_it_ended_and_where(code, status, stage, detail) -> None:
    outcome = run_child([sys.executable, "-c", code], limit_s=60)
    assert (outcome.status, outcome.stage) == (status, stage), outcome
    assert re.fullmatch(detail, outcome.detail), outcome.detail


def test_a_child_past_its_limit_is_killed_with_everything_it_started() -> None:
    tic = time.monotonic()
    outcome = run_child([sys.executable, "-c", HANG], limit_s=3)
    assert time.monotonic() - tic < 30
    assert (outcome.status, outcome.stage, outcome.detail) == ("timed out", "build", "after 3 s")
    grandchild = int(outcome.stdout.split()[0])
    for _ in range(50):  # reaped by init shortly after the kill
        if not Path(f"/proc/{grandchild}").exists() or "Z" in stat_state(grandchild):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the child's own child {grandchild} outlived the timeout")


def stat_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


@pytest.mark.parametrize(
    ("child", "how"),
    [
        (f"exec {sys.executable} -c '{SEGFAULT}'",
         r'build crashed: SIGSEGV, in File ".*ctypes.*", line \d+ in string_at'),
        ("echo 'STAGE build'; echo 'STAGE timing'; kill -SEGV $$",
         r"built; then crashed in stage timing: SIGSEGV"),
        ("echo 'STAGE build'; sleep 30", r"build timed out: after 2 s"),
        ("echo 'torch._inductor.exc.InductorError: no C++ compiler' >&2; exit 3",
         r"build failed: exit 3: torch\._inductor\.exc\.InductorError: no C\+\+ compiler"),
        ("exit 0", r"build failed: exit 0 without writing its row"),  # ended without its row
    ],
    ids=["crash", "crash-after-build", "hang", "error", "no-row"],
)  # fmt: skip
def test_a_variant_whose_child_dies_costs_its_row_only(child, how, tmp_path, monkeypatch):
    """gpu.py's side: what it reports for the variant's build (built, crashed with its
    signal, timed out, failed), from the child running ``gpu.py --child inference``."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\n{child}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    args = gpu.build_parser().parse_args(["--quick", "--seed-s", "1"])
    args.workdir = tmp_path
    outcome, row = gpu.in_child(args, torch.device("cpu"), "inference", "AOTInductor fp32", 2)
    assert row is None
    assert re.fullmatch(how, gpu.build_status(outcome, row)), gpu.build_status(outcome, row)


def test_a_variant_built_and_timed_says_so() -> None:
    row = InferenceRow("AOTInductor fp32", build_s=12.34)
    assert gpu.build_status(Outcome("finished", 20.0, "timing"), row) == "built in 12.3 s; timed"


def test_a_child_stopped_by_what_the_budget_had_left_says_so() -> None:
    timed_out = Outcome("timed out", 5.0, "build", "after 5 s")
    cut = gpu.budget_said(timed_out, cut=True)
    assert cut.detail == "after 5 s (all --budget-s had left)"
    assert gpu.build_status(cut, None) == "build timed out: after 5 s (all --budget-s had left)"
    assert gpu.budget_said(timed_out, cut=False) == timed_out  # its own limit
    crashed = Outcome("crashed", 1.0, "build", "SIGSEGV")
    assert gpu.budget_said(crashed, cut=True) == crashed


def test_host_syncs_are_counted_from_cudas_sync_debug_warnings(monkeypatch) -> None:
    """On a GPU each epoch runs in CUDA's sync debug mode "warn"; the warnings it raises
    are counted, other warnings are not, and the mode is back to default afterwards, also
    when the epoch fails. (CUDA itself is not needed to check the counting.)"""
    from benchmarks.gpu_training import host_syncs

    modes: list[str] = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    counts: list[int] = []
    with host_syncs(torch.device("cuda"), counts):
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert (counts, modes) == ([2], ["warn", "default"])
    with pytest.raises(RuntimeError), host_syncs(torch.device("cuda"), counts):
        raise RuntimeError("the epoch failed")
    assert modes[-1] == "default"
    with pytest.warns(UserWarning), host_syncs(torch.device("cpu"), counts):
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
    assert counts == [2] and len(modes) == 4  # nothing counted on a CPU


# --- the AOTInductor diagnosis ------------------------------------------------------------
@pytest.fixture(scope="module")
def diagnosis(tmp_path_factory: pytest.TempPathFactory):
    """The dry run with a real segfault injected into one configuration as its compiling
    starts, and a hang into another; the third builds and runs for real."""
    tmp = tmp_path_factory.mktemp("aoti")
    args = ["benchmarks/aoti_diagnose.py", "--device", "cpu", "--quick", "--jobs", "3",
            "--json", str(tmp / "aoti.json"), "--repro-dir", str(tmp / "repro"),
            "--inject", "crash:one-call", "--inject", "hang:static-batch"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads((tmp / "aoti.json").read_text()), tmp


@pytest.mark.slow
def test_the_diagnosis_says_which_configuration_built_crashed_or_hung(diagnosis) -> None:
    done, report, tmp = diagnosis
    results = {r["name"]: r for r in report["results"]}
    assert list(results) == ["shipped", "static-batch", "one-call"]
    shipped = results["shipped"]
    assert (shipped["status"], shipped["detail"]) == ("finished", "")
    assert shipped["compile_s"] > 0 and shipped["max_abs_diff"] < 1e-4  # BatchNorm folded
    hung = results["static-batch"]
    assert (hung["status"], hung["detail"]) == ("timed out", "after 30 s")
    crashed = results["one-call"]
    assert (crashed["status"], crashed["stage"]) == ("crashed", "compile")
    assert re.fullmatch(r'SIGSEGV, in File ".*ctypes.*", line \d+ in string_at', crashed["detail"])
    assert "Built and ran: shipped." in done.stdout
    assert (tmp / "aoti.md").read_text().strip() == done.stdout.strip()
    assert not [p for p in os.listdir("/proc") if p.isdigit() and "static-batch" in cmdline(p)]


def cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_the_reproduction_is_the_crashing_script_and_needs_torch_alone(diagnosis) -> None:
    done, report, tmp = diagnosis
    repro = tmp / "repro" / "aoti_repro_one-call.py"
    assert (report["reproduction"], report["reproduces"]) == (str(repro), "one-call")
    assert f"Reproduction (one-call): python3 {repro}" in done.stdout
    imports = {line.split()[1] for line in repro.read_text().splitlines()
               if line.startswith(("import ", "from "))}  # fmt: skip
    assert {name.split(".")[0].rstrip(",") for name in imports} <= {"os", "copy", "torch"}
    again = subprocess.run(
        [sys.executable, str(repro)], cwd=tmp, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == -11, again.stderr[-2000:]  # SIGSEGV, as in the diagnosis
    assert again.stdout.split() == ["STAGE", "export", "STAGE", "compile"]


def test_the_diagnosis_names_the_configurations_it_has(capsys) -> None:
    from benchmarks import aoti_diagnose

    assert aoti_diagnose.main(["--device", "cpu", "--quick", "--only", "nope"]) == 2
    assert "no configuration 'nope'; there are: shipped, static-batch, one-call" in (
        capsys.readouterr().err
    )


def test_every_gpu_configuration_changes_one_thing_from_what_ships() -> None:
    """The GPU list starts with what steps.optimize ships on a GPU (its builder's options:
    freezing and max-autotune, FP16) and names each configuration once."""
    from benchmarks.aoti_diagnose import gpu_configs

    configs = gpu_configs()
    names = [c.name for c in configs]
    assert names[0] == "shipped" and len(set(names)) == len(names)
    shipped = configs[0]
    assert (shipped.dtype, shipped.options, shipped.path) == (
        "float16", {"freezing": True, "max_autotune": True}, "aot_compile",
    )  # fmt: skip
    assert {c.name for c in configs if c.model == "tiny"} == {"tiny", "tiny-no-autotune"}
