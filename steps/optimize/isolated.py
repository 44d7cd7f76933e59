"""Every variant built in a build process: a crash, an abort or a hang costs that variant.

The step writes what a build needs to files (the trained model as ``weights.pt`` +
``model.json``, the parity images and eager's logits, the calibration images), and a
spawned build process (``steps.common.isolation.Worker``, started early by
``build_worker`` so that its imports overlap the step's loading) loads them once and builds
one variant per call (``steps.optimize.build_job``: builder, save, reload, parity gate)
into the shared work directory (OpenVINO converts the ONNX file an earlier variant wrote).
What comes back is the variant's record, a small ``VariantEntry``; never a model. A build
that raises, crashes (SIGSEGV, SIGABRT), exits or runs past ``optimize.build_timeout_s`` is
recorded as failed with its ``failure`` (the signal or the limit, and the innermost frame
faulthandler found); the next variant gets a fresh process.
``optimize.variants_per_process`` starts one after that many variants too.

This module is the step's side and imports no builder: only the build process does.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from steps.common.config import OptimizeConfig
from steps.common.contracts.failure import ProcessFailure
from steps.common.contracts.variants import VariantEntry
from steps.common.isolation import ChildFailed, Worker
from steps.common.trained_model import TrainedModel
from steps.optimize.variants import Spec, specs

SETUP, BUILD = "steps.optimize.build_job:setup", "steps.optimize.build_job:build"


@dataclass(frozen=True)
class BuildInputs:
    """What a build process loads: file paths and the settings (small, pickled)."""

    model_dir: str  # weights.pt + model.json, as the training step writes them
    tensors: str  # {"x": parity images, "reference": eager's logits, "calibration": ...}
    device: str
    optimize: dict  # OptimizeConfig, as JSON values
    workdir: str


def build_worker(cfg: OptimizeConfig, scratch: Path) -> Worker:
    """The build processes' worker (not started); ``scratch`` holds faulthandler's files."""
    per_process = cfg.variants_per_process
    return Worker(SETUP, scratch, name="build", jobs_per_process=per_process)


def build_variants(
    cfg: OptimizeConfig,
    trained: TrainedModel,
    x: torch.Tensor,
    reference: torch.Tensor,
    calibration: torch.Tensor | None,
    workdir: Path,
    worker: Worker,
) -> dict[str, VariantEntry]:
    """Every configured variant's record, each built by ``worker``'s build process; built
    files lie in ``workdir``. ``x``: normalised parity images, ``reference``: eager's
    logits on them."""
    worker.setup_arg = _write_inputs(cfg, trained, x, reference, calibration, workdir)
    entries: dict[str, VariantEntry] = {}
    for spec in specs(cfg.variants, x.device, cfg):
        try:
            entry = worker.run(BUILD, spec, cfg.build_timeout_s, "build")
        except ChildFailed as exc:
            entry = not_built(spec, "failed", exc.failure.message, exc.failure)
        optional = spec.kind in cfg.optional_variants or spec.name in cfg.optional_variants
        entries[spec.name] = entry = dataclasses.replace(entry, optional=optional)
        line = f"  {spec.name:<14} {spec.precision:<5} {entry.status:<8} {_note(entry)}"
        print(line, file=sys.stderr)
    print(f"  ({worker.started} build process(es) started)", file=sys.stderr)
    return entries


def not_built(
    spec: Spec, status: str, reason: str, failure: ProcessFailure | None = None
) -> VariantEntry:
    return VariantEntry(
        kind=spec.kind, file=spec.file, precision=spec.precision,  # type: ignore[arg-type]
        status=status, reason=reason, failure=failure,  # type: ignore[arg-type]
    )  # fmt: skip


def _note(entry: VariantEntry) -> str:
    if entry.built and entry.parity is not None:
        parity = entry.parity
        return f"max|diff| {parity.max_abs_diff:.2e}, top-1 {parity.top1_agreement:.4f}"
    return entry.reason


def _write_inputs(
    cfg: OptimizeConfig,
    trained: TrainedModel,
    x: torch.Tensor,
    reference: torch.Tensor,
    calibration: torch.Tensor | None,
    workdir: Path,
) -> BuildInputs:
    """The trained model and the tensors as files a build process loads, beside ``workdir``."""
    folder = workdir.parent / "build-inputs"
    model_dir = folder / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in trained.model.state_dict().items()}
    torch.save(state, model_dir / "weights.pt")
    (model_dir / "model.json").write_text(json.dumps(trained.meta))
    tensors = folder / "tensors.pt"
    torch.save({"x": x.cpu(), "reference": reference.cpu(), "calibration": calibration}, tensors)
    return BuildInputs(
        model_dir=str(model_dir),
        tensors=str(tensors),
        device=str(x.device),
        optimize=cfg.model_dump(mode="json"),
        workdir=str(workdir),
    )
