"""benchmarks/gpu.py, the one command for a bare GPU machine: its CPU dry run end to end
with the packages such a machine lacks made unimportable, its settings held to the
trainer's defaults, its synthetic data, and its time budget."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from benchmarks import gpu
from benchmarks.learnable_data import learnable_cifar
from steps.common.config import TrainConfig
from tests.conftest import REPO_ROOT

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
sys.argv = ["benchmarks/gpu.py", *sys.argv[1:]]
runpy.run_path("benchmarks/gpu.py", run_name="__main__")
"""


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    args = ["--device", "cpu", "--quick", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(out.read_text())


@pytest.mark.slow
def test_the_dry_run_trains_every_loop_and_times_every_variant(dry_run) -> None:
    _, report = dry_run
    loops = [row["loop"] for row in report["training"]]
    assert loops[0].startswith("seed loop") and len(loops) == 4, loops
    assert any("torch.compile" in loop for loop in loops)
    for row in report["training"]:
        assert row["epoch_s"] and all(s > 0 for s in row["epoch_s"]), row
        assert len(row["accuracy"]) == len(row["epoch_s"])
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
    assert report["not_run"] == [["TensorRT fp16", "needs CUDA"]]


@pytest.mark.slow
def test_the_dry_run_prints_the_tables_it_saved(dry_run, tmp_path) -> None:
    done, report = dry_run
    assert done.stdout.startswith("CPU ")
    for heading in ("Training to 90% test accuracy", "Inference, the trained ResNet-9", "Not run"):
        assert heading in done.stdout
    for row in report["training"] + report["inference"]:
        assert (row.get("loop") or row["variant"]) in done.stdout
    assert "| TensorRT fp16 | needs CUDA |" in done.stdout


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
    assert len(skipped) == 4, skipped
    assert all(why.startswith("time budget") for what, why in skipped.items() if "ours" in what)
    assert skipped["inference"] == "no ResNet-9 was trained"
    assert out.with_suffix(".md").read_text().strip() == capsys.readouterr().out.strip()


def test_cuda_asked_for_where_there_is_none_is_refused(capsys, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main(["--device", "cuda"]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err


SEGFAULT = """import ctypes, threading, time; threading.Thread(target=time.sleep, args=(9,)).start()
ctypes.string_at(0)"""


@pytest.mark.parametrize(
    ("child", "words"),
    [
        # A real segfault with a second thread asleep: the crashed thread's frame is named.
        (f"exec {sys.executable} -c '{SEGFAULT}'",
         r'the process crashed \(SIGSEGV, in File ".*ctypes.*", line \d+ in string_at\)'),
        ("echo 'torch._inductor.exc.InductorError: no C++ compiler' >&2; exit 3",
         r"exit 3: torch\._inductor\.exc\.InductorError: no C\+\+ compiler"),
        ("exit 0", r"exit 0: \(no output\)"),  # ended without writing its row
    ],
    ids=["crash", "error", "no-row"],
)  # fmt: skip
def test_a_variant_whose_child_dies_costs_its_row_only(child, words, tmp_path, monkeypatch):
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\n{child}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    model = torch.nn.Linear(1, 1)
    with pytest.raises(gpu.ChildFailed, match=words):
        gpu.measure_in_child("AOTInductor fp32", model, torch.device("cpu"), gpu.QUICK, tmp_path)
    assert (tmp_path / "resnet9.pt").exists()  # the weights it handed over
