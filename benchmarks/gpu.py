"""One command for a bare GPU machine: the pipeline's trainer beside the seed articles'
loop, and the trained model's inference variants, in one printout.

    python3 benchmarks/gpu.py [--device cuda|cpu] [--quick] [--budget-s S] [--target A]
                              [--json FILE]

Made for the GPU machines this project borrows: PyTorch and a GPU, nothing of ours
installed (no MLflow, pydantic, boto3 or TensorRT), no network, about ten minutes a command.
Its path imports torch, torchvision, PIL and the trainer's plain-torch modules only
(``steps.train.data``, ``.loop``, ``.training``; ``steps.common.models``), a rule
``tests/import_graph.py`` holds; ``--device cpu --quick`` is its dry run, a test in CI.

Training, on learnable synthetic CIFAR-shaped data (``learnable_data.py``: 50,000 + 10,000
uint8 images), each loop until the test accuracy reaches ``--target`` or its epochs (or,
for the seed loop, ``--seed-s`` seconds of training) run out:

- the seed articles' loop (``seed_loop.py``: DataLoader + PIL, batch 64, SimpleCNN);
- the pipeline's trainer, ``steps.train.training.build_training`` with ``TrainConfig``'s
  defaults (uint8 data on the device, batch 512, bf16 autocast, channels_last, one-cycle
  nesterov SGD, label smoothing), on SimpleCNN and ResNet-9, and ResNet-9 compiled
  (``train.compile``).

images/s is the median epoch after the first (which pays cuDNN's and Inductor's start-up,
shown on its own); seconds to the target count the training loops only, as the trainer's
``time_to_target_s`` does.

Inference (``gpu_inference.py``): the trained ResNet-9 as eager FP32 and FP16, compiled
(CUDA graphs), AOTInductor FP16 and FP32 (as ``steps.optimize`` builds them) and TensorRT
where installed, at batch 1, 8, 64 and 256: the median ms of a call and images/s at it,
and how far each variant's logits are from eager FP32's.

The sections run in that order while ``--budget-s`` lasts; what did not run says why.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gpu_inference import InferenceRow, measure, reference_logits, variants
from benchmarks.learnable_data import learnable_cifar
from benchmarks.seed_loop import SeedLoop
from steps.common.models import build_model
from steps.train.data import Dataset
from steps.train.distributed import Dist
from steps.train.loop import evaluate, train_one_epoch
from steps.train.training import build_training


@dataclass(frozen=True)
class TrainSettings:
    """``TrainConfig``'s fields that ``build_training`` reads, with its defaults (a test
    holds them equal): the config model itself needs pydantic, which the machine lacks."""

    model: Literal["resnet9", "simplecnn"] = "resnet9"
    epochs: int = 10
    batch_size: int = 512
    lr: float = 0.2
    momentum: float = 0.9
    weight_decay: float = 5e-4
    label_smoothing: float = 0.2
    warmup_epochs: float = 2.0
    seed: int = 0
    amp_bf16: bool = True
    amp_bf16_cpu: bool | Literal["auto"] = "auto"
    channels_last: bool = True
    compile: bool = False
    width: int = 64
    crop_padding: int = 4


@dataclass(frozen=True)
class Scale:
    """How big the run is: the GPU's, or ``--quick``'s (the CPU dry run)."""

    train_images: int = 50_000
    test_images: int = 10_000
    width: int = 64  # ResNet-9's
    epochs: int = 10  # the trainer's epochs at most (TrainConfig's default)
    batch_size: int = 512  # TrainConfig's default
    seed_s: float = 45.0  # the seed loop's training time at most
    batch_sizes: tuple[int, ...] = (1, 8, 64, 256)
    timing_s: float = 1.0  # per variant and batch size
    needs: float = 1.0  # the variants' ``needs_s`` scale


QUICK = Scale(2048, 512, 16, 4, 64, seed_s=2.0, batch_sizes=(1, 8), timing_s=0.2, needs=0.05)


SEED_LOOP = "seed loop: SimpleCNN, DataLoader + PIL, batch 64, fp32"


@dataclass
class TrainRow:
    loop: str
    images_per_epoch: int
    epoch_s: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)  # test accuracy after each epoch
    to_target_s: float | None = None  # training seconds until the target was reached

    @property
    def images_per_s(self) -> float:
        later = self.epoch_s[1:] or self.epoch_s
        return self.images_per_epoch / statistics.median(later)


@dataclass
class Report:
    """What ran and what did not; with ``json_path`` set, written again after every row (as
    JSON, and the markdown beside it), so a run cut short still leaves what it measured."""

    title: str
    target: float
    batch_sizes: tuple[int, ...]
    training: list[TrainRow] = field(default_factory=list)
    inference: list[InferenceRow] = field(default_factory=list)
    not_run: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    json_path: Path | None = None

    def add(self, row: TrainRow | InferenceRow) -> None:
        (self.training if isinstance(row, TrainRow) else self.inference).append(row)
        self.save()

    def skip(self, what: str, why: str) -> None:
        self.not_run.append((what, why))
        self.save()

    def save(self) -> None:
        if self.json_path is None:
            return
        data = {k: v for k, v in asdict(self).items() if k != "json_path"}
        self.json_path.write_text(json.dumps(data, indent=2, default=str))
        self.json_path.with_suffix(".md").write_text(markdown(self) + "\n")


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


def timed(device: torch.device, work: Callable[[], Any]) -> float:
    """Seconds for one call of ``work``, the device's queue drained at both ends."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    tic = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - tic


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- training ----------------------------------------------------------------------------
def train_seed_loop(data: Dataset, device: torch.device, target: float, seconds: float):
    loop = SeedLoop(data.train_images.cpu().numpy(), data.train_labels.cpu().numpy(), device)
    row = TrainRow(SEED_LOOP, len(loop.loader.dataset))
    while sum(row.epoch_s) < seconds:
        row.epoch_s.append(timed(device, loop.epoch))
        row.accuracy.append(loop.accuracy(data.test_images, data.test_labels))
        if row.accuracy[-1] >= target:
            row.to_target_s = sum(row.epoch_s)
            break
    return row


def train_ours(label: str, hp: TrainSettings, data: Dataset, device: torch.device, target: float):
    """The trainer's set-up and epoch loop (``steps.train.fit.run_epochs`` without its
    checkpoints and MLflow): returns the row and the trained network."""
    t = build_training(hp, data, Dist(0, 1, 0, device))
    if hp.compile:
        t.model = torch.compile(t.model)
    row = TrainRow(label, t.train_batches.steps_per_epoch * hp.batch_size)
    for epoch in range(hp.epochs):
        row.epoch_s.append(
            timed(
                device,
                lambda e=epoch: train_one_epoch(
                    t.model, t.train_batches, e, t.optimizer, t.scheduler, t.criterion, t.autocast
                ),
            )
        )
        sums, _ = evaluate(t.raw, t.test_batches, t.num_classes, t.autocast)
        row.accuracy.append(float(sums[1] / sums[2]))
        say(f"  epoch {epoch + 1}: {row.epoch_s[-1]:.2f} s, test accuracy {row.accuracy[-1]:.4f}")
        if row.accuracy[-1] >= target:
            row.to_target_s = sum(row.epoch_s)
            break
    return row, t.raw


def run_training(report: Report, data: Dataset, device, scale: Scale, budget: Budget):
    """Every training row the budget allows; the trained ResNet-9 (eager), or None."""
    base = TrainSettings(width=scale.width, epochs=scale.epochs, batch_size=scale.batch_size)
    bf16 = "bf16" if device.type == "cuda" or base.amp_bf16_cpu else "fp32"
    ours = [
        (
            f"ours: SimpleCNN, tensor data path, batch {scale.batch_size}",
            replace(base, model="simplecnn"),
            10,
        ),
        (f"ours: ResNet-9, batch {scale.batch_size}, {bf16}, channels_last", base, 30),
        ("ours: ResNet-9, as above + torch.compile", replace(base, compile=True), 120),
    ]
    say(f"training: the seed loop, at most {scale.seed_s:.0f} s")
    report.add(train_seed_loop(data, device, report.target, scale.seed_s))
    trained = None
    for label, hp, needs in ours:
        if budget.left() < needs * scale.needs:
            report.skip(label, f"time budget: {budget.left():.0f} s left of --budget-s")
            continue
        say(f"training: {label}")
        try:
            row, net = train_ours(label, hp, data, device, report.target)
        except Exception as exc:  # one loop's failure must not lose the others' rows
            report.skip(label, f"{type(exc).__name__}: {exc}".splitlines()[0])
            continue
        report.add(row)
        if hp.model == "resnet9" and not hp.compile:
            trained = net
    return trained


# --- inference ---------------------------------------------------------------------------
def run_inference(report: Report, model, device, scale: Scale, budget: Budget, workdir: Path):
    reference = reference_logits(model, device)
    for variant in variants(model, device, workdir, max_autotune=True):
        if budget.left() < variant.needs_s * scale.needs:
            report.skip(variant.name, f"time budget: {budget.left():.0f} s left of --budget-s")
            continue
        say(f"inference: {variant.name}")
        try:
            if variant.isolated:
                report.add(measure_in_child(variant.name, model, device, scale, workdir))
            else:
                batches = list(scale.batch_sizes)
                report.add(measure(variant, device, batches, reference, scale.timing_s))
        except Exception as exc:  # a variant that fails to build is reported, not fatal
            report.skip(variant.name, f"{type(exc).__name__}: {exc}".splitlines()[0])
    if importlib.util.find_spec("torch_tensorrt") is None or device.type != "cuda":
        why = "torch-tensorrt is not installed here (the optimize image's [tensorrt] extra)"
        report.skip("TensorRT fp16", why if device.type == "cuda" else "needs CUDA")


class ChildFailed(RuntimeError):
    """The child process building one variant died or failed; the message says how."""


def measure_in_child(name: str, model, device, scale: Scale, workdir: Path) -> InferenceRow:
    """``measure`` of one variant in a child process running this script on the trained
    weights: a compiler that crashes its process costs this row, not the run."""
    weights, row_file = workdir / "resnet9.pt", workdir / "row.json"
    if not weights.exists():
        torch.save({"width": scale.width, "state_dict": model.state_dict()}, weights)
    row_file.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--device", device.type]
    command += ["--quick"] if scale == QUICK else []
    command += ["--one-variant", name, "--weights", str(weights), "--row-json", str(row_file)]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a crash prints where Python was
    done = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    if done.returncode < 0:
        where = crash_site(done.stderr)
        raise ChildFailed(f"the process crashed ({signal.Signals(-done.returncode).name}{where})")
    if done.returncode != 0 or not row_file.exists():
        lines = [line for line in done.stderr.splitlines() if line.strip()] or ["(no output)"]
        raise ChildFailed(f"exit {done.returncode}: {lines[-1][:300]}")
    row = InferenceRow(**json.loads(row_file.read_text()))
    row.p50_ms = {int(batch): ms for batch, ms in row.p50_ms.items()}  # JSON keys are text
    return row


def crash_site(stderr: str) -> str:
    """ ", in <file, line, function>" of the crashed thread's innermost Python frame, from
    faulthandler's report (``Current thread ...`` then its frames, innermost first)."""
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), None)
    if start is None:
        return ""
    frame = next((line.strip() for line in lines[start + 1 :] if line.startswith("  File ")), "")
    return f", in {frame}" if frame else ""


def measure_alone(args: argparse.Namespace, device: torch.device, scale: Scale) -> int:
    """The child's side of ``measure_in_child``: rebuild the trained net, time one variant."""
    saved = torch.load(args.weights, map_location=device)
    model = build_model("resnet9", 10, saved["width"]).to(device, memory_format=torch.channels_last)
    model.load_state_dict(saved["state_dict"])
    found = {v.name: v for v in variants(model, device, args.weights.parent, max_autotune=True)}
    row = measure(found[args.one_variant], device, list(scale.batch_sizes),
                  reference_logits(model, device), scale.timing_s)  # fmt: skip
    args.row_json.write_text(json.dumps(asdict(row)))
    return 0


# --- report ------------------------------------------------------------------------------
def markdown(report: Report) -> str:
    batch_sizes = report.batch_sizes
    lines = [report.title, ""]
    lines += [
        f"Training to {report.target:.0%} test accuracy on learnable synthetic CIFAR-shaped data",
        "",
        "| loop | images/s | first epoch s | epochs | s to target | last test acc | vs seed |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    seed = report.training[0] if report.training else None
    for row in report.training:
        reached = f"{row.to_target_s:.1f}" if row.to_target_s is not None else "not reached"
        ratio = row.images_per_s / seed.images_per_s if seed else 0
        lines.append(
            f"| {row.loop} | {row.images_per_s:,.0f} | {row.epoch_s[0]:.2f} | "
            f"{len(row.epoch_s)} | {reached} | {row.accuracy[-1]:.4f} | {ratio:.1f}x |"
        )
    cells = " | ".join(f"batch {b}: p50 ms (images/s)" for b in batch_sizes)
    lines += [
        "",
        "Inference, the trained ResNet-9, one call timed at a time",
        "",
        f"| variant | build s | {cells} | max abs diff vs eager fp32 | top-1 agreement |",
        "|---|---:|" + "---:|" * len(batch_sizes) + "---:|---:|",
    ]
    for row in report.inference:
        timings = " | ".join(
            f"{row.p50_ms[b]:.3f} ({row.images_per_s(b):,.0f})" for b in batch_sizes
        )
        lines.append(
            f"| {row.variant} | {row.build_s:.1f} | {timings} | {row.max_abs_diff:.2e} | "
            f"{row.top1_agreement:.4f} |"
        )
    lines += ["", "Not run", "", "| what | why |", "|---|---|"]
    lines += [f"| {what} | {why} |" for what, why in report.not_run] or ["| - | - |"]
    return "\n".join(lines)


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        extra = f"CUDA {torch.version.cuda}, capability {torch.cuda.get_device_capability(device)}"
    else:
        name = platform.processor() or platform.machine()
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        extra = f"{torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}"
    return (
        f"{device.type.upper()} {name} ({extra}); torch {torch.__version__}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if present")
    parser.add_argument("--quick", action="store_true", help="small data and models: dry run")
    parser.add_argument("--budget-s", type=float, default=330.0, help="seconds for all sections")
    parser.add_argument("--target", type=float, default=0.9, help="test accuracy to reach")
    parser.add_argument("--seed-s", type=float, help="the seed loop's training seconds at most")
    parser.add_argument("--json", type=Path, help="also write FILE and FILE.md, row by row")
    # A child measuring one variant on saved weights (measure_in_child); not for users.
    parser.add_argument("--one-variant", help=argparse.SUPPRESS)
    parser.add_argument("--weights", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--row-json", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu.py: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    scale = QUICK if args.quick else Scale()
    if args.seed_s is not None:
        scale = replace(scale, seed_s=args.seed_s)
    if args.one_variant:
        return measure_alone(args, device, scale)
    budget = Budget(args.budget_s)
    report = Report(describe(device), args.target, scale.batch_sizes, json_path=args.json)
    say(report.title)

    data = learnable_cifar(scale.train_images, scale.test_images, device)
    trained = run_training(report, data, device, scale, budget)
    if trained is None:
        report.skip("inference", "no ResNet-9 was trained")
    else:
        with tempfile.TemporaryDirectory(prefix="gpu-bench-") as workdir:
            run_inference(report, trained, device, scale, budget, Path(workdir))

    report.save()
    print(markdown(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
