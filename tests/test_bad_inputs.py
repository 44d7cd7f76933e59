"""A demanding user's bad inputs, across the flow's command line and every step: each is one
line on stderr naming the field or file and what is wrong, the right exit code (2: the
user's input), and nothing written where a reader would look. Every case runs the real
command line in a fresh working directory: one case per program as a process of its own
(``python flows/cifar.py``, ``python -m steps.X``: the CLI end to end, its exit status
and stderr as a user sees them), the others through the same ``main(argv)`` in this
process, with its stdout, stderr and exit code captured (SUBPROCESS names which is which)."""

from __future__ import annotations

import importlib
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
from PIL import Image

from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE, build_model
from tests.helpers.contract_samples import BENCHMARK
from tests.helpers.paths import REPO_ROOT

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


class RunsCode:
    """Unpickling this runs ``touch <marker>``: what a malicious weights.pt would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def weights_bytes(kind: str, marker: Path) -> bytes:
    buffer = io.BytesIO()
    if kind == "bare tensor":
        torch.save(torch.zeros(3), buffer)
    elif kind == "garbage":
        return b"this is not a checkpoint\n" * 10
    elif kind == "malicious pickle":
        torch.save({"conv1.weight": RunsCode(marker)}, buffer)
    elif kind == "plain pickle":
        return pickle.dumps({"conv1.weight": RunsCode(marker)})
    return buffer.getvalue()


def model_dir(root: Path, weights: bytes | None = None) -> Path:
    """weights.pt + model.json as steps.train writes them (SimpleCNN)."""
    root.mkdir(parents=True, exist_ok=True)
    if weights is None:
        buffer = io.BytesIO()
        torch.save(build_model("simplecnn").state_dict(), buffer)
        weights = buffer.getvalue()
    (root / "weights.pt").write_bytes(weights)
    meta = {
        "architecture": "simplecnn",
        "num_classes": 10,
        "classes": CLASSES,
        "mean": list(CIFAR10_MEAN),
        "std": list(CIFAR10_STD),
        "input_shape": list(INPUT_SHAPE),
        "width": 64,
    }
    (root / "model.json").write_text(json.dumps(meta))
    return root


def bomb_png(path: Path, side: int = 20000) -> Path:
    """A PNG whose header claims side x side pixels: Pillow refuses it at open."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b""))
    path.write_bytes(png + chunk(b"IEND", b""))
    return path


def run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CIFAR_CACHE_DIR": str(cwd / "cache")}
    environ.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_in_process(
    argv: list[str],
    cwd: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """What ``run`` does, through the program's ``main(argv)`` in this process: the same
    working directory and environment, its exit code (an argparse exit's too) and output."""
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("CIFAR_CACHE_DIR", str(cwd / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()  # what came before is not this command's
    if argv[0] == FLOW[0]:  # python flows/cifar.py ARGS: its __main__ block
        from flows import cifar
        from flows.cli.main import main

        def call() -> int:
            return main(argv[1:], cifar)
    else:  # python -m steps.X ARGS: the step's __main__ runs main()
        assert argv[0] == "-m", argv
        module = importlib.import_module(argv[1])
        if not hasattr(module, "main"):
            module = importlib.import_module(f"{argv[1]}.step")

        def call() -> int:
            return module.main(argv[2:])

    try:
        code = call()
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def written(cwd: Path) -> list[str]:
    """What a failed command left in its working directory (inputs and caches aside)."""
    ignore = {"inputs", "cache"}
    return sorted(p.name for p in cwd.iterdir() if p.name not in ignore)


CIFAR = str(REPO_ROOT / "flows" / "cifar.py")
FLOW = [CIFAR, "--config", str(REPO_ROOT / "configs" / "smoke.yaml")]

# name, argv, extra environment, expected exit code, words the one error line holds
CASES = [
    ("flow: nproc 0", [*FLOW, "--set", "train.nproc_per_node=0"], {}, 2,
     "train.nproc_per_node: 0 processes: use 1 or more"),
    ("flow: nproc negative, render", [*FLOW, "--render", "--set", "train.nproc_per_node=-1"], {},
     2, "train.nproc_per_node: -1 processes"),
    ("flow: cron out of range", [*FLOW, "--render", "--cron", "--set", "schedule.cron=61 25 * * *"],
     {}, 2, "schedule.cron: '61 25 * * *' is not a valid cron schedule"),
    ("flow: cron of 4 fields", [*FLOW, "--render", "--set", "schedule.cron=0 2 * *"], {}, 2,
     "has 4 fields; a cron schedule has 5"),
    ("flow: time zone", [*FLOW, "--render", "--set", "schedule.timezone=Mars/Olympus_Mons"], {}, 2,
     "schedule.timezone: 'Mars/Olympus_Mons' is not an IANA time zone"),
    ("flow: ftp root", [*FLOW, "--set", "storage.root_uri=ftp://host/artifacts"], {}, 2,
     "storage.root_uri: ftp://host/artifacts: unsupported scheme 'ftp'"),
    ("flow: bucketless root", [*FLOW, "--render", "--set", "storage.root_uri=s3:///artifacts"], {},
     2, "s3:///artifacts: an s3:// URI needs a bucket name"),
    ("flow: ftp source", [*FLOW, "--set", "data.source=ftp://host/cifar.tar.gz"], {}, 2,
     "data.source: ftp://host/cifar.tar.gz: unsupported scheme 'ftp'"),
    ("flow: missing tarball", [*FLOW, "--set", "data.source=nowhere/cifar-10-python.tar.gz"], {},
     2, "data.source nowhere/cifar-10-python.tar.gz: no such file"),
    ("flow: resume a missing dir", [CIFAR, "--resume", "runs/nothing-here"], {}, 2,
     "--resume runs/nothing-here: not a local run (no state.json there)"),
    ("flow: resume a dir that is no run", [CIFAR, "--resume", "inputs"], {}, 2,
     "--resume inputs: not a local run"),
    ("flow: resume with a new config", [*FLOW, "--resume", "runs/nothing-here"], {}, 2,
     "--resume continues a run with the config and parameters it started with: drop"),
    ("stage: ftp dest", ["-m", "steps.stage_data", "--source", "synthetic:20", "--dest",
     "ftp://host/x"], {}, 2, "stage_data: error: ftp://host/x: unsupported scheme 'ftp'"),
    ("stage: bucketless dest", ["-m", "steps.stage_data", "--source", "synthetic:20", "--dest",
     "s3:///x"], {}, 2, "s3:///x: an s3:// URI needs a bucket name"),
    ("train: not a dataset", ["-m", "steps.train", "--dataset", "inputs", "--output", "model",
     "--set", "tracking.enabled=false"], {}, 2, "no manifest.json, so not a staged dataset"),
    ("optimize: not a dataset", ["-m", "steps.optimize", "--model", "inputs/model", "--dataset",
     "inputs", "--output", "opt"], {}, 2, "no manifest.json, so not a staged dataset"),
    ("predict: top-k past the classes", ["-m", "steps.predict", "inputs/cat.png", "--model",
     "inputs/model", "--top-k", "11"], {}, 2, "--top-k 11: the model has 10 classes"),
    ("predict: top-k 0", ["-m", "steps.predict", "inputs/cat.png", "--model", "inputs/model",
     "--top-k", "0"], {}, 2, "--top-k 0: must be 1 or more"),
    ("serve_check: not an http URL", ["-m", "steps.serve_check", "--url", "ftp://host:21",
     "--dataset", "inputs", "--benchmark", "inputs"], {}, 2,
     "serve_check: error: --url 'ftp://host:21': not an http:// or https:// URL with a host"),
    ("serve_check: no benchmark.json", ["-m", "steps.serve_check", "--url", "http://127.0.0.1:9",
     "--dataset", "inputs", "--benchmark", "inputs"], {}, 2,
     "--benchmark inputs/benchmark.json: no such file; pass the benchmark step's output"),
    ("serve_check: not a benchmark.json", ["-m", "steps.serve_check", "--url",
     "http://127.0.0.1:9", "--dataset", "inputs", "--benchmark", "inputs/cat.png"], {}, 2,
     "--benchmark inputs/cat.png: not a benchmark.json (steps.benchmark's report)"),
    ("serve_check: a JSON that is no report", ["-m", "steps.serve_check", "--url",
     "http://127.0.0.1:9", "--dataset", "inputs", "--benchmark", '{"variants": {}}'], {}, 2,
     "--benchmark: not a benchmark.json (steps.benchmark's report)"),
    ("serve_check: batch past the request limit", ["-m", "steps.serve_check", "--url",
     "http://127.0.0.1:9", "--dataset", "inputs", "--benchmark", "inputs", "--batch", "2000"],
     {}, 2, "--batch 2000: use 1..1024"),
    ("serve_check: not a dataset", ["-m", "steps.serve_check", "--url", "http://127.0.0.1:9",
     "--dataset", "inputs", "--benchmark", BENCHMARK.dumps().decode()], {}, 2,
     "no manifest.json, so not a staged dataset"),
]  # fmt: skip


# The one case per program that runs as a process of its own (by test id); the rest of
# each program's cases call its main(argv) in this process.
SUBPROCESS = {
    "flow: nproc 0",
    "stage: ftp dest",
    "train: not a dataset",
    "optimize: not a dataset",
    "predict: top-k past the classes",
    "serve_check: not an http URL",
    "malicious pickle-benchmark",
}


@pytest.fixture
def command(request: pytest.FixtureRequest, monkeypatch, capsys):
    """Runs a case's command line: as a process for the ids in SUBPROCESS, else in this
    process."""
    case = request.node.callspec.id if hasattr(request.node, "callspec") else ""

    def run_case(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
        if case in SUBPROCESS:
            return run(argv, cwd, **env)
        return run_in_process(argv, cwd, monkeypatch, capsys, **env)

    return run_case


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    inputs = tmp_path / "inputs"
    model_dir(inputs / "model")
    Image.new("RGB", (40, 30), (200, 120, 40)).save(inputs / "cat.png")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "env", "code", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_one_line_exit_code_and_nothing_written(
    workdir: Path, command, argv: list[str], env: dict[str, str], code: int, words: str
) -> None:
    done = command(argv, workdir, **env)
    assert done.returncode == code, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    assert words in errors[0], errors[0]
    assert "Traceback" not in done.stderr
    assert written(workdir) == [], written(workdir)


WEIGHTS = ["bare tensor", "garbage", "malicious pickle", "plain pickle"]
REASONS = {
    "bare tensor": "holds a Tensor, not a state dict",
    "garbage": "not a PyTorch weights file",
    "malicious pickle": "refers to posix.system, which is code, not tensors: refused",
    "plain pickle": "not a PyTorch weights file",
}
STEPS = {
    "optimize": ["-m", "steps.optimize", "--model", "bad", "--dataset", "inputs", "--output", "o"],
    "benchmark": ["-m", "steps.benchmark", "--model", "bad", "--optimized", "inputs", "--dataset",
                  "inputs", "--output", "report"],
    "predict": ["-m", "steps.predict", "inputs/cat.png", "--model", "bad"],
}  # fmt: skip


@pytest.mark.parametrize("step", sorted(STEPS))
@pytest.mark.parametrize("kind", WEIGHTS)
def test_bad_weights_are_named_refused_and_never_run(
    workdir: Path, command, tmp_path_factory: pytest.TempPathFactory, step: str, kind: str
) -> None:
    marker = tmp_path_factory.mktemp("marker") / "code-ran"
    model_dir(workdir / "bad", weights_bytes(kind, marker))
    done = command(STEPS[step], workdir)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert line.startswith(f"{step}: error: ") and "/bad/weights.pt: " in line, line
    assert REASONS[kind] in line, line
    assert "weights_only" not in done.stderr  # never the advice to load it unsafely
    assert not marker.exists()
    assert sorted(written(workdir)) == ["bad"]


def test_a_decompression_bomb_is_named_and_the_other_pictures_classified(
    workdir: Path, command
) -> None:
    inputs = workdir / "inputs"
    bomb_png(inputs / "huge.png")
    Image.new("RGB", (64, 64), (10, 200, 30)).save(inputs / "good2.jpg")
    argv = ["-m", "steps.predict", "inputs/cat.png", "inputs/huge.png", "inputs/good2.jpg"]
    done = command([*argv, "--model", "inputs/model"], workdir)
    assert done.returncode == 2, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["inputs/cat.png", "inputs/good2.jpg"]
    assert all(any(c in line for c in CLASSES) for line in lines), lines
    (error,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert "inputs/huge.png: 400,000,000 pixels, over Pillow's limit" in error
    assert "decompression bomb" in error


def program(argv: list[str]) -> str:
    return "flows/cifar.py" if argv[0] == FLOW[0] else argv[1]


def test_every_program_runs_once_as_a_process_of_its_own() -> None:
    """SUBPROCESS names real cases, one per program that the cases run."""
    argv_of = {name: argv for name, argv, *_ in CASES}
    argv_of |= {f"{kind}-{step}": STEPS[step] for kind in WEIGHTS for step in STEPS}
    assert SUBPROCESS - set(argv_of) == set()
    chosen = [program(argv_of[case]) for case in SUBPROCESS]
    assert sorted(chosen) == sorted({program(argv) for argv in argv_of.values()})
