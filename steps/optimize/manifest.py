"""``variants.json`` as ``steps.optimize`` writes it (``steps.common.contracts.variants``):
the manifest of one build, what a rerun with the same weights and settings reuses, and
the settings that decide the files."""

from __future__ import annotations

import sys
from typing import Any

import torch

from steps.common.config import ConfigError, PipelineConfig
from steps.common.contracts import ContractError
from steps.common.contracts.variants import BatchRange, InputSpec, VariantEntry, VariantsManifest
from steps.common.device import cpu_capability, environment
from steps.common.optimized_variants import VARIANTS_FILE
from steps.common.trained_model import TestSplit, TrainedModel
from steps.optimize.variants import KINDS, NAMES

INPUT_NOTE = "pixels / 255, minus mean, over std, per channel; not in the graph"


def check_config(cfg: PipelineConfig) -> None:
    """What the config's types cannot say: the batch range's order, and that every name
    in ``optional_variants`` and ``extra_variants`` is a variant's."""
    opt = cfg.optimize
    if not opt.min_batch <= opt.opt_batch <= opt.max_batch:
        raise ConfigError(
            f"optimize: need min_batch <= opt_batch <= max_batch, got {opt.min_batch}, "
            f"{opt.opt_batch}, {opt.max_batch}"
        )
    extra = [e.name for e in opt.extra_variants]
    taken = sorted({n for n in extra if n in NAMES or extra.count(n) > 1})
    if taken:
        raise ConfigError(
            f"optimize.extra_variants: {', '.join(taken)} named twice or as a built-in "
            "variant; give each a name of its own"
        )
    unknown = sorted(set(opt.optional_variants) - set(KINDS) - set(NAMES) - set(extra))
    if unknown:
        raise ConfigError(
            f"optimize.optional_variants: unknown {', '.join(unknown)}; "
            f"expected kinds {', '.join(KINDS)} or variant names"
        )


def settings(cfg: PipelineConfig, device: torch.device) -> dict[str, Any]:
    """What the files depend on besides the weights: a rerun with the same reuses them."""
    return {**cfg.optimize.model_dump(mode="json"), "device": device.type, "isa": cpu_capability()}


def reusable(store, trained: TrainedModel, wanted: dict[str, Any]) -> VariantsManifest | None:
    """The manifest already under the output, if it was made from these weights with these
    settings; None otherwise (one this version cannot read is rebuilt, said on stderr)."""
    if not store.exists(VARIANTS_FILE):
        return None
    try:
        found = VariantsManifest.parse(store.read_bytes(VARIANTS_FILE), store.uri(VARIANTS_FILE))
    except ContractError as exc:
        print(f"Not reused: {exc}", file=sys.stderr)
        return None
    if found.weights_sha256 == trained.weights_sha256 and found.settings == wanted:
        return found
    return None


def manifest(
    cfg: PipelineConfig,
    optimized_uri: str,
    trained: TrainedModel,
    split: TestSplit,
    device: torch.device,
    entries: dict[str, VariantEntry],
) -> VariantsManifest:
    opt = cfg.optimize
    return VariantsManifest(
        optimized_uri=optimized_uri,
        model_uri=trained.uri,
        weights_sha256=trained.weights_sha256,
        architecture=trained.meta["architecture"],
        classes=[str(c) for c in trained.classes],
        input=InputSpec(
            layout="NCHW",
            shape=[-1, *trained.meta["input_shape"]],
            dtype="the variant's precision (fp32: float32)",
            normalised=True,
            mean=list(trained.mean),
            std=list(trained.std),
            note=INPUT_NOTE,
        ),
        batch_range=BatchRange(min=opt.min_batch, opt=opt.opt_batch, max=opt.max_batch),
        dataset_uri=split.uri,
        dataset_digest=split.digest,
        device=device.type,
        environment=environment(device),
        settings=settings(cfg, device),
        variants=entries,
    )
