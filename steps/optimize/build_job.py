"""The build process's side of ``steps.optimize.isolated``: the model and tensors loaded
back from the files the step wrote (``setup``, once), then one variant built, reloaded and
gated per call (``build``, ``steps.optimize.gate``). Only the build process imports this
module, and with it the builders (Inductor, ONNX, OpenVINO, TensorRT): the step's own
process does not need them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from steps.common.config import OptimizeConfig, StorageConfig
from steps.common.contracts.variants import VariantEntry
from steps.common.trained_model import load_trained
from steps.optimize.gate import ParityError, build_one
from steps.optimize.isolated import BuildInputs, not_built
from steps.optimize.variants import BuildContext, SkipVariant, Spec


@dataclass
class BuildState:
    """A build process's state: the build context (the model exported once per
    precision), the parity images and eager's logits on them."""

    ctx: BuildContext
    x: torch.Tensor
    reference: torch.Tensor


def setup(inputs: BuildInputs) -> BuildState:
    """The model and tensors back from their files."""
    device = torch.device(inputs.device)
    model_uri = Path(inputs.model_dir).as_uri()
    trained = load_trained(model_uri, StorageConfig(), device)
    tensors = torch.load(inputs.tensors, map_location="cpu", weights_only=True)
    cfg = OptimizeConfig.model_validate(inputs.optimize)
    ctx = BuildContext(trained.model, device, cfg, Path(inputs.workdir), tensors["calibration"])
    return BuildState(ctx, tensors["x"].to(device), tensors["reference"].to(device))


def build(state: BuildState, spec: Spec) -> VariantEntry:
    """One variant built and gated, its record (what goes back)."""
    try:
        return build_one(spec, state.ctx, state.x, state.reference)
    except SkipVariant as exc:
        return not_built(spec, "skipped", str(exc))
    except ParityError as exc:
        return exc.entry
