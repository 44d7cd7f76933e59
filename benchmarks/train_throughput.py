"""Training throughput: our trainer's epoch loop against the seed articles' loop.

    python benchmarks/train_throughput.py [--images N] [--repeats R] [--threads T]
                                          [--resnet-images N] [--compile] [--markdown]
                                          [--quick]

Both loops run in this process on the same CIFAR-shaped uint8 data (N x 32 x 32 x 3):

- seed loop: the PyTorch CIFAR-10 tutorial's: a torchvision ``DataLoader`` (no workers)
  over a dataset that makes a PIL image per sample, ``ToTensor`` + ``Normalize``, batch
  64, SGD (lr 0.001, momentum 0.9), the SimpleCNN;
- ours: the trainer's own set-up and epoch, ``steps.train.loop.build_training`` with
  ``TrainConfig``'s defaults and ``train_one_epoch`` (uint8 data on the device, random
  crop + flip + normalisation as batched tensor ops, batch 512, fused SGD nesterov with the
  one-cycle schedule and label smoothing), the same SimpleCNN; and the default ResNet-9;
  channels_last memory format, and bf16 autocast on a GPU (on a CPU both fp32 and bf16
  rows: ``train.amp_bf16_cpu``, whose default ``auto`` takes bf16 only where the CPU has
  native BF16; the row the default takes here says so).

Each figure is the median of ``--repeats`` timed epochs after one untimed warm-up epoch;
on a GPU the timing uses CUDA events around the epoch. ``--quick``: every loop in seconds
on 256 images (the test suite's dry run; the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

# its sibling by name: ``python benchmarks/train_throughput.py`` puts benchmarks/ first on
# sys.path; the project itself is the installed one (pip install -e .)
from seed_loop import SeedLoop

from steps.common.config import TrainConfig
from steps.train.data import Dataset
from steps.train.distributed import Dist
from steps.train.loop import build_training, train_one_epoch, use_bf16_autocast, wrap_model


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x {os.cpu_count()}"
    return f"{platform.machine()} x {os.cpu_count()}"


def timed(device: torch.device, epoch: Callable[[], None]) -> float:
    """Seconds for one call of ``epoch``: CUDA events on a GPU, perf_counter on a CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        epoch()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000
    tic = time.perf_counter()
    epoch()
    return time.perf_counter() - tic


def interleaved(
    loops: dict[str, tuple[int, Callable[[], None]]], device: torch.device, repeats: int
) -> dict[str, tuple[float, float, float]]:
    """(median, min, max) images/s per loop; the loops take turns, so a noisy neighbour
    on a shared machine slows all of them alike rather than one."""
    for _, epoch in loops.values():
        epoch()  # warm-up: allocator, cuDNN/oneDNN kernel choice, compilation
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(repeats):
        for name, (images, epoch) in loops.items():
            rates[name].append(images / timed(device, epoch))
    return {name: (statistics.median(r), min(r), max(r)) for name, r in rates.items()}


def our_loop(
    name: str,
    images: np.ndarray,
    labels: np.ndarray,
    device: torch.device,
    compile_: bool,
    bf16: bool,
) -> Callable[[], None]:
    data = torch.from_numpy(images).to(device)  # N x 32 x 32 x 3, as staged
    targets = torch.from_numpy(labels).to(device)
    dataset = Dataset("synthetic://", "random", "-", [str(k) for k in range(10)],
                      data, targets, data[:512], targets[:512])  # fmt: skip
    # TrainConfig's defaults, with a long schedule (the lr stays sensible) and this row's
    # model, precision and compilation.
    hp = TrainConfig(
        model=name, epochs=100, warmup_epochs=10, compile=compile_,
        amp_bf16=bf16, amp_bf16_cpu=bf16,
    )  # fmt: skip
    training = build_training(hp, dataset, Dist(0, 1, 0, device))
    wrap_model(training, hp, Dist(0, 1, 0, device))
    counter = iter(range(10**9))

    def epoch() -> None:
        totals = train_one_epoch(training, next(counter))
        totals.sum().item()  # wait for the device, as the trainer does at epoch end

    return epoch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=10_240, help="images per epoch")
    parser.add_argument("--resnet-images", type=int, help="for ResNet-9 (default: 2048 on CPU)")
    parser.add_argument("--repeats", type=int, default=5, help="timed epochs per loop")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--compile", action="store_true", help="torch.compile our models")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument(
        "--quick", action="store_true", help="a dry run: 256 images (64 for ResNet-9), 1 epoch"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.resnet_images, args.repeats = 256, 64, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.images, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, args.images).astype(np.int64)
    resnet_n = args.resnet_images or (args.images if device.type == "cuda" else 2048)

    on_gpu = device.type == "cuda"
    seed_row = "seed loop: SimpleCNN, DataLoader + PIL + ToTensor, batch 64"
    cpu_default_bf16 = use_bf16_autocast(TrainConfig(), device)
    default = " (the trainer's default here)"
    ours_row = f"ours: SimpleCNN, tensor data path, batch 512{', bf16' if on_gpu else ''}"
    ours_row += default if on_gpu or not cpu_default_bf16 else ""
    bf16_row = "ours: SimpleCNN, as above + bf16 autocast (train.amp_bf16_cpu)"
    bf16_row += default if cpu_default_bf16 else ""
    resnet_row = f"ours: ResNet-9 (6.6M params), batch 512, {resnet_n:,} images"
    loops = {
        seed_row: (args.images, SeedLoop(images, labels, device).epoch),
        ours_row: (
            args.images,
            our_loop("simplecnn", images, labels, device, args.compile, on_gpu),
        ),
    }
    if not on_gpu:
        loops[bf16_row] = (
            args.images,
            our_loop("simplecnn", images, labels, device, args.compile, bf16=True),
        )
    results = interleaved(loops, device, args.repeats)
    resnet = our_loop("resnet9", images[:resnet_n], labels[:resnet_n], device, args.compile, on_gpu)
    results |= interleaved({resnet_row: (resnet_n, resnet)}, device, max(1, args.repeats // 2))
    rows = list(results.items())
    seed = results[seed_row]

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    cpu_note = f", {torch.get_num_threads()} torch threads" if device.type == "cpu" else ""
    title = (
        f"{device.type.upper()} {name}{cpu_note}; torch "
        f"{torch.__version__}; median of {args.repeats} epochs of {args.images:,} images"
        f"{'; torch.compile' if args.compile else ''}"
    )
    header = ("loop", "images/s (median)", "min .. max", "vs seed loop")
    cells = [
        (
            label,
            f"{rate:,.0f}",
            f"{low:,.0f} .. {high:,.0f}",
            f"{rate / seed[0]:.2f}x" if label != resnet_row else "(another model)",
        )
        for label, (rate, low, high) in rows
    ]
    if args.markdown:
        print(f"{title}\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for cell in cells:
            print("| " + " | ".join(cell) + " |")
    else:
        table = Table(*header, title=title)
        for cell in cells:
            table.add_row(*cell)
        Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
