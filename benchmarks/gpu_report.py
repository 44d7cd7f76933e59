"""``gpu.py``'s report: the training rows, the inference rows, every child's outcome (each
variant's build: built, crashed with its signal, timed out, failed) and what did not run,
saved as JSON and markdown after every row, so a run cut short still leaves what it
measured. Standard library and torch only (``describe`` names the device)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from benchmarks.gpu_inference import InferenceRow


@dataclass
class TrainRow:
    loop: str
    images_per_epoch: int
    epoch_s: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)  # test accuracy after each epoch
    to_target_s: float | None = None  # training seconds until the target was reached
    # Host synchronisations CUDA's sync debug mode reported in each epoch's training and
    # evaluation (None on a CPU, and for the seed loop): 0 is the trainer's rule.
    host_syncs: list[int] | None = None

    @property
    def images_per_s(self) -> float:
        later = self.epoch_s[1:] or self.epoch_s
        return self.images_per_epoch / statistics.median(later)


@dataclass
class Report:
    title: str
    target: float
    batch_sizes: tuple[int, ...]
    training: list[TrainRow] = field(default_factory=list)
    inference: list[InferenceRow] = field(default_factory=list)
    # Every child that ran: (what, outcome), e.g. ("AOTInductor fp16", "built"),
    # ("AOTInductor fp32", "crashed (SIGSEGV) while building, in File ...").
    outcomes: list[tuple[str, str]] = field(default_factory=list)
    not_run: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    json_path: Path | None = None

    def add(self, row: TrainRow | InferenceRow) -> None:
        (self.training if isinstance(row, TrainRow) else self.inference).append(row)
        self.save()

    def outcome(self, what: str, how: str) -> None:
        self.outcomes.append((what, how))
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


def markdown(report: Report) -> str:
    batch_sizes = report.batch_sizes
    lines = [report.title, ""]
    lines += [
        f"Training to {report.target:.0%} test accuracy on learnable synthetic CIFAR-shaped data",
        "",
        "| loop | images/s | first epoch s | epochs | s to target | last test acc | vs seed "
        "| host syncs an epoch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    seed = report.training[0] if report.training else None
    for row in report.training:
        reached = f"{row.to_target_s:.1f}" if row.to_target_s is not None else "not reached"
        ratio = row.images_per_s / seed.images_per_s if seed else 0
        syncs = "-" if row.host_syncs is None else str(max(row.host_syncs, default=0))
        lines.append(
            f"| {row.loop} | {row.images_per_s:,.0f} | {row.epoch_s[0]:.2f} | "
            f"{len(row.epoch_s)} | {reached} | {row.accuracy[-1]:.4f} | {ratio:.1f}x | {syncs} |"
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
    lines += ["", "Each loop and variant in a process of its own", "", "| what | outcome |"]
    lines += ["|---|---|"] + [f"| {what} | {how} |" for what, how in report.outcomes]
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
        threads = torch.get_num_threads()
        extra = f"{threads} thread{'s' * (threads != 1)}, {torch.backends.cpu.get_cpu_capability()}"
    return (
        f"{device.type.upper()} {name} ({extra}); torch {torch.__version__}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
