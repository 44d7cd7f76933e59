"""One command for a bare GPU machine: the pipeline's trainer beside the seed articles'
loop, and the trained model's inference variants, in one printout.

    python3 benchmarks/gpu.py [--device cuda|cpu] [--quick] [--budget-s S] [--target A]
                              [--seed-s S] [--json FILE]

Made for the GPU machines this project borrows: PyTorch and a GPU, nothing of ours
installed (no MLflow, pydantic, boto3 or TensorRT), no network, about ten minutes a command.
Its path imports torch, torchvision, PIL and the trainer's plain-torch modules only
(``steps.train.data``, ``.loop``, ``.distributed``; ``steps.common.models``), a rule
``tests/helpers/import_rules.py`` holds; ``--device cpu --quick`` is its dry run, a test in CI.

Training, on learnable synthetic CIFAR-shaped data (``learnable_data.py``: 50,000 + 10,000
uint8 images), each loop until the test accuracy reaches ``--target`` or its epochs (or,
for the seed loop, ``--seed-s`` seconds of training) run out:

- the seed articles' loop (``seed_loop.py``: DataLoader + PIL, batch 64, SimpleCNN);
- the pipeline's trainer, ``steps.train.loop.build_training`` and ``wrap_model`` with
  ``TrainConfig``'s defaults (uint8 data on the device, batch 512, bf16 autocast,
  channels_last, fused one-cycle nesterov SGD, label smoothing), on SimpleCNN and ResNet-9;
  ResNet-9 compiled (``train.compile``) with Inductor's caches cold, then again in a new
  process with the caches the first left (``TORCHINDUCTOR_CACHE_DIR``: what a second run
  or another rank on the node finds), and compiled with CUDA graphs
  (``train.compile_mode=reduce-overhead``). On a GPU each epoch's host synchronisations
  are counted (CUDA's sync debug mode): the trainer's rule is none.

images/s is the median epoch after the first (which pays cuDNN's and Inductor's start-up,
shown on its own); seconds to the target count the training loops only, as the trainer's
``time_to_target_s`` does.

Inference (``gpu_inference.py``): the trained ResNet-9 as eager FP32 and FP16, compiled
(CUDA graphs), AOTInductor FP16 and FP32 (as ``steps.optimize`` builds them) and TensorRT
where installed, at batch 1, 8, 64 and 256: the median ms of a call and images/s at it,
and how far each variant's logits are from eager FP32's.

Every loop and every variant runs in a child process of its own with a time limit
(``gpu_child.py``): a build that crashes (a signal), hangs or fails costs its row, and the
report says which it was and where. The sections run in that order while ``--budget-s``
lasts; what did not run says why.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

# A bare GPU machine has this checkout but no install of it: the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gpu_child import STAGE, Outcome, run_child
from benchmarks.gpu_inference import InferenceRow, measure, reference_logits, variants
from benchmarks.gpu_report import Report, TrainRow, describe, markdown
from benchmarks.gpu_training import (
    SEED_LOOP,
    TrainSettings,
    say,
    train_ours,
    train_seed_loop,
)
from benchmarks.learnable_data import learnable_cifar
from steps.common.models import build_model
from steps.train.data import Dataset


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
    needs: float = 1.0  # the loops' and variants' ``needs_s`` scale
    limits: float = 1.0  # their children's time limits' scale (a CPU compiles slower)


QUICK = Scale(2048, 512, 16, 4, 64, seed_s=2.0, batch_sizes=(1, 8), timing_s=0.2, needs=0.05,
              limits=10.0)  # fmt: skip

CACHE_DIR = "inductor-cache"  # TORCHINDUCTOR_CACHE_DIR of the compiled loops, in the workdir


@dataclass(frozen=True)
class Loop:
    """One training row: its settings (None: the seed loop), the seconds it needs at least
    before the budget lets it start, its child's time limit (both on a GPU)."""

    label: str
    settings: TrainSettings | None
    needs_s: float
    limit_s: float
    needs_cuda: bool = False
    in_quick: bool = True  # False: the dry run leaves it out (the same code as another loop)


def loops(scale: Scale, device: torch.device) -> list[Loop]:
    base = TrainSettings(width=scale.width, epochs=scale.epochs, batch_size=scale.batch_size)
    bf16 = "bf16" if device.type == "cuda" or base.amp_bf16_cpu else "fp32"
    resnet = f"ours: ResNet-9, batch {scale.batch_size}, {bf16}, channels_last"
    compiled = replace(base, compile=True)
    return [
        Loop(SEED_LOOP, None, 0, 2 * scale.seed_s + 120),
        Loop(f"ours: SimpleCNN, tensor data path, batch {scale.batch_size}",
             replace(base, model="simplecnn"), 10, 120),
        Loop(resnet, base, 30, 180),
        Loop("ours: ResNet-9, as above + torch.compile, caches cold", compiled, 120, 240),
        Loop("ours: ResNet-9, as above + torch.compile, caches warm (a new process)",
             compiled, 60, 180, in_quick=False),
        Loop("ours: ResNet-9, as above + torch.compile reduce-overhead (CUDA graphs)",
             replace(compiled, compile_mode="reduce-overhead"), 90, 240, needs_cuda=True),
    ]  # fmt: skip


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


# --- training, in a child process a loop ---------------------------------------------------
def train_alone(args: argparse.Namespace, device: torch.device, scale: Scale) -> int:
    """The child's side of one training loop: the saved data, one row, and the eager
    ResNet-9's weights for the inference section."""
    loop = {loop.label: loop for loop in loops(scale, device)}[args.what]
    data = load_data(args.workdir, device)
    print(f"{STAGE}training", flush=True)
    if loop.settings is None:
        row = train_seed_loop(data, device, args.target, scale.seed_s)
    else:
        row, net = train_ours(loop.label, loop.settings, data, device, args.target)
        if loop.settings.model == "resnet9" and not loop.settings.compile:
            state = {"width": scale.width, "state_dict": net.state_dict()}
            torch.save(state, args.workdir / "resnet9.pt")
    args.row_json.write_text(json.dumps(asdict(row)))
    return 0


def run_training(report: Report, args, device, scale: Scale, budget: Budget) -> None:
    for loop in loops(scale, device):
        if loop.needs_cuda and device.type != "cuda":
            report.skip(loop.label, "needs CUDA")
            continue
        if args.quick and not loop.in_quick:
            report.skip(loop.label, "--quick: the code of the loop before it, run again")
            continue
        if loop.settings is not None and budget.left() < loop.needs_s * scale.needs:
            report.skip(loop.label, f"time budget: {budget.left():.0f} s left of --budget-s")
            continue
        say(f"training: {loop.label}")
        own = loop.limit_s * scale.limits
        limit = own if loop.settings is None else min(own, budget.left())
        env = {"TORCHINDUCTOR_CACHE_DIR": str(args.workdir / CACHE_DIR)}
        outcome, row = in_child(args, device, "train", loop.label, limit, env)
        outcome = budget_said(outcome, limit < own)
        report.outcome(loop.label, "trained" if row else outcome.describe())
        if row:
            report.add(TrainRow(**row))


# --- inference, in a child process a variant ----------------------------------------------
def measure_alone(args: argparse.Namespace, device: torch.device, scale: Scale) -> int:
    """The child's side of one variant: rebuild the trained net, build and time the variant."""
    saved = torch.load(args.workdir / "resnet9.pt", map_location=device)
    model = build_model("resnet9", 10, saved["width"]).to(device, memory_format=torch.channels_last)
    model.load_state_dict(saved["state_dict"])
    found = {v.name: v for v in variants(model, device, args.workdir, max_autotune=True)}
    row = measure(found[args.what], device, list(scale.batch_sizes),
                  reference_logits(model, device), scale.timing_s)  # fmt: skip
    args.row_json.write_text(json.dumps(asdict(row)))
    return 0


def build_status(outcome: Outcome, row: InferenceRow | None) -> str:
    """The variant's build: built (then timed, or what stopped the timing), or how the build
    ended: crashed with its signal, timed out, failed."""
    if row is not None:
        return f"built in {row.build_s:.1f} s; timed"
    if outcome.stage in ("", "build"):
        return f"build {outcome.status}" + (f": {outcome.detail}" if outcome.detail else "")
    return f"built; then {outcome.describe()}"


def run_inference(report: Report, args, device, scale: Scale, budget: Budget) -> None:
    saved = torch.load(args.workdir / "resnet9.pt", map_location="cpu")
    model = build_model("resnet9", 10, saved["width"])  # for the variants' names alone
    for variant in variants(model, device, args.workdir, max_autotune=True):
        if budget.left() < variant.needs_s * scale.needs:
            report.skip(variant.name, f"time budget: {budget.left():.0f} s left of --budget-s")
            continue
        say(f"inference: {variant.name}")
        own = variant.limit_s * scale.limits
        limit = min(own, budget.left())
        outcome, found = in_child(args, device, "inference", variant.name, limit)
        outcome = budget_said(outcome, limit < own)
        row = None
        if found:
            row = InferenceRow(**found)
            row.p50_ms = {int(batch): ms for batch, ms in row.p50_ms.items()}  # JSON keys: text
            report.add(row)
        report.outcome(variant.name, build_status(outcome, row))
    if device.type != "cuda":
        report.skip("TensorRT fp16", "needs CUDA")
    elif importlib.util.find_spec("torch_tensorrt") is None:
        why = "torch-tensorrt is not installed here (the optimize image's [tensorrt] extra)"
        report.skip("TensorRT fp16", why)


# --- the children -------------------------------------------------------------------------
def in_child(
    args: argparse.Namespace,
    device: torch.device,
    kind: str,
    what: str,
    limit_s: float,
    env: dict[str, str] | None = None,
) -> tuple[Outcome, dict | None]:
    """Run this script for one loop or variant in a child process; its row, if it wrote one."""
    row_file = args.workdir / "row.json"
    row_file.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--device", device.type]
    command += ["--quick"] if args.quick else []
    command += ["--target", str(args.target), "--seed-s", str(args.seed_s)]
    command += ["--child", kind, "--what", what, "--workdir", str(args.workdir)]
    command += ["--row-json", str(row_file)]
    outcome = run_child(command, limit_s, env=env)
    row = json.loads(row_file.read_text()) if outcome.finished and row_file.exists() else None
    if outcome.finished and row is None:
        outcome = replace(outcome, status="failed", detail="exit 0 without writing its row")
    if not outcome.finished:
        say(f"  {what}: {outcome.describe()}")
    return outcome, row


def budget_said(outcome: Outcome, cut: bool) -> Outcome:
    """A child stopped at what ``--budget-s`` had left, not at its own limit, says so."""
    if outcome.status != "timed out" or not cut:
        return outcome
    return replace(outcome, detail=f"{outcome.detail} (all --budget-s had left)")


def load_data(workdir: Path, device: torch.device) -> Dataset:
    saved = torch.load(workdir / "data.pt")
    tensors = {name: value.to(device) for name, value in saved["tensors"].items()}
    return Dataset(**saved["meta"], **tensors)


def save_data(data: Dataset, workdir: Path) -> None:
    fields = asdict(data)
    tensors = {k: v for k, v in fields.items() if isinstance(v, torch.Tensor)}
    meta = {k: v for k, v in fields.items() if k not in tensors}
    torch.save({"meta": meta, "tensors": tensors}, workdir / "data.pt")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if present")
    parser.add_argument("--quick", action="store_true", help="small data and models: dry run")
    parser.add_argument("--budget-s", type=float, help="seconds for all sections (330; quick 1800)")
    parser.add_argument("--target", type=float, default=0.9, help="test accuracy to reach")
    parser.add_argument("--seed-s", type=float, help="the seed loop's training seconds at most")
    parser.add_argument("--json", type=Path, help="also write FILE and FILE.md, row by row")
    # A child running one loop or variant (in_child); not for users.
    parser.add_argument("--child", choices=("train", "inference"), help=argparse.SUPPRESS)
    parser.add_argument("--what", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--row-json", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu.py: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    scale = QUICK if args.quick else Scale()
    if args.quick:  # the dry run, beside another test worker on a 2-core CI machine
        torch.set_num_threads(1)
    if args.seed_s is not None:
        scale = replace(scale, seed_s=args.seed_s)
    args.seed_s = scale.seed_s
    if args.child == "train":
        return train_alone(args, device, scale)
    if args.child == "inference":
        return measure_alone(args, device, scale)
    budget = Budget(args.budget_s if args.budget_s is not None else 1800 if args.quick else 330)
    report = Report(describe(device), args.target, scale.batch_sizes, json_path=args.json)
    say(report.title)

    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as workdir:
        args.workdir = Path(workdir)
        save_data(learnable_cifar(scale.train_images, scale.test_images, torch.device("cpu")),
                  args.workdir)  # fmt: skip
        run_training(report, args, device, scale, budget)
        if (args.workdir / "resnet9.pt").exists():
            run_inference(report, args, device, scale, budget)
        else:
            report.skip("inference", "no ResNet-9 was trained")

    report.save()
    print(markdown(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
