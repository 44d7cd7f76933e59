"""A variant's first load and run, in a child process (``steps.common.isolation``) before
the benchmark loads it into its own: a runtime that crashes, aborts or hangs there costs
that variant, not the step. The child loads the file the parent fetched and runs it once
at every batch size the benchmark will; what crosses is the path, the variant's record
and the batch sizes, and back a word (None, or why it cannot run here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from steps.common.contracts.variants import VariantEntry
from steps.common.optimized_variants import VariantUnavailable, load_variant_file
from steps.common.trained_model import DTYPES


@dataclass(frozen=True)
class FirstRun:
    """One variant's file and how the benchmark will call it."""

    entry: VariantEntry
    path: str
    device: str
    batch_sizes: tuple[int, ...]


def first_run(state: None, job: FirstRun) -> str | None:
    """In the child: load ``job``'s variant and run it at each batch size; None if it ran,
    else why it cannot run here (VariantUnavailable's message)."""
    device = torch.device(job.device)
    try:
        runner = load_variant_file(job.entry, Path(job.path), device)
    except VariantUnavailable as exc:
        return str(exc)
    dtype = DTYPES[job.entry.precision]
    with torch.inference_mode():
        for batch in job.batch_sizes:
            runner(torch.randn(batch, 3, 32, 32, device=device).to(dtype))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return None
