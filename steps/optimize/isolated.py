"""Every variant built in a build process: a crash, an abort or a hang costs that variant.

The parent (``build_variants``) writes what a build needs to files (the trained model as
``weights.pt`` + ``model.json``, the parity images and eager's logits, the calibration
images), and a spawned build process (``steps.common.isolation.Worker``) loads them once
(``setup``) and builds one variant per call (``build``): builder, save, reload, parity gate
(``steps.optimize.gate``), into the shared work directory (OpenVINO converts the ONNX file
an earlier variant wrote). What comes back is the variant's record, a small
``VariantEntry``; never a model. A build that raises, crashes (SIGSEGV, SIGABRT), exits or
runs past ``optimize.build_timeout_s`` is recorded as failed with its ``failure`` (the
signal or the limit, and the innermost frame faulthandler found); the next variant gets a
fresh process. ``optimize.variants_per_process`` starts one after that many variants too.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from steps.common.config import OptimizeConfig, StorageConfig
from steps.common.contracts.variants import VariantEntry
from steps.common.isolation import ChildFailed, Worker
from steps.common.trained_model import TrainedModel, load_trained
from steps.optimize.gate import ParityError, build_one
from steps.optimize.variants import BuildContext, SkipVariant, Spec, specs

INPUTS = "build-inputs"  # the folder of what a build process loads, beside the work dir


@dataclass(frozen=True)
class BuildInputs:
    """What a build process loads: file paths and the settings (small, pickled)."""

    model_dir: str  # weights.pt + model.json, as the training step writes them
    tensors: str  # {"x": parity images, "reference": eager's logits, "calibration": ...}
    device: str
    optimize: dict  # OptimizeConfig, as JSON values
    workdir: str


@dataclass
class BuildState:
    """A build process's state: the build context (the model exported once per
    precision), the parity images and eager's logits on them."""

    ctx: BuildContext
    x: torch.Tensor
    reference: torch.Tensor


def setup(inputs: BuildInputs) -> BuildState:
    """In the build process: the model and tensors back from their files."""
    device = torch.device(inputs.device)
    model_uri = Path(inputs.model_dir).as_uri()
    trained = load_trained(model_uri, StorageConfig(), device)
    tensors = torch.load(inputs.tensors, map_location="cpu", weights_only=True)
    cfg = OptimizeConfig.model_validate(inputs.optimize)
    ctx = BuildContext(trained.model, device, cfg, Path(inputs.workdir), tensors["calibration"])
    return BuildState(ctx, tensors["x"].to(device), tensors["reference"].to(device))


def build(state: BuildState, spec: Spec) -> VariantEntry:
    """In the build process: one variant built and gated, its record (what goes back)."""
    try:
        return build_one(spec, state.ctx, state.x, state.reference)
    except SkipVariant as exc:
        return _not_built(spec, "skipped", str(exc))
    except ParityError as exc:
        return exc.entry


def build_variants(
    cfg: OptimizeConfig,
    trained: TrainedModel,
    x: torch.Tensor,
    reference: torch.Tensor,
    calibration: torch.Tensor | None,
    workdir: Path,
) -> dict[str, VariantEntry]:
    """Every configured variant's record, each built in a build process; built files lie
    in ``workdir``. ``x``: normalised parity images, ``reference``: eager's logits on them."""
    folder = workdir.parent / INPUTS
    inputs = _write_inputs(cfg, trained, x, reference, calibration, folder, workdir)
    entries: dict[str, VariantEntry] = {}
    per_process = cfg.variants_per_process
    with Worker(setup, inputs, folder, name="build", jobs_per_process=per_process) as worker:
        for spec in specs(cfg.variants, x.device, cfg):
            try:
                entry = worker.run(build, spec, cfg.build_timeout_s, "build")
            except ChildFailed as exc:
                entry = _not_built(spec, "failed", exc.failure.message, exc.failure)
            optional = spec.kind in cfg.optional_variants or spec.name in cfg.optional_variants
            entries[spec.name] = entry = dataclasses.replace(entry, optional=optional)
            line = f"  {spec.name:<14} {spec.precision:<5} {entry.status:<8} {_note(entry)}"
            print(line, file=sys.stderr)
    print(f"  ({worker.started} build process(es) started)", file=sys.stderr)
    return entries


def _not_built(spec: Spec, status: str, reason: str, failure=None) -> VariantEntry:
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
    folder: Path,
    workdir: Path,
) -> BuildInputs:
    """The trained model and the tensors as files a build process loads."""
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
        device=x.device.type if x.device.type != "cuda" else str(x.device),
        optimize=cfg.model_dump(mode="json"),
        workdir=str(workdir),
    )
