"""The parity gate every variant passes: reloaded from its file, its logits against eager's
on held-out images; and ``build_one``, which builds, reloads and gates one variant (in a
build process: ``steps.optimize.build_job``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from steps.common.config import OptimizeConfig
from steps.common.contracts.variants import Parity, VariantEntry
from steps.common.device import cpu_bf16_features, cpu_capability
from steps.common.optimized_variants import load_variant_file
from steps.common.trained_model import DTYPES, Runner, run_batched
from steps.optimize.builders import builder_for
from steps.optimize.variants import BuildContext, Spec


class ParityError(RuntimeError):
    """A variant's logits differ from eager beyond the configured thresholds."""

    def __init__(self, message: str, entry: VariantEntry) -> None:
        super().__init__(message)
        self.entry = entry  # the variant's record, parity numbers included


def parity(
    runner: Runner,
    spec: Spec,
    x: torch.Tensor,
    reference: torch.Tensor,
    cfg: OptimizeConfig,
) -> Parity:
    """Max |logit difference| and top-1 agreement against eager on held-out images, run in
    chunks of max_batch and once at min_batch (both ends of the dynamic range). INT8 is
    gated on top-1 agreement alone, on ``int8_parity_samples`` images."""
    if spec.precision == "int8":
        return _int8_parity(runner, x[: cfg.int8_parity_samples], reference, cfg)
    x, reference = x[: cfg.parity_samples], reference[: cfg.parity_samples]
    inputs = x.to(DTYPES[spec.precision])
    logits = run_batched(runner, inputs, cfg.max_batch, cfg.min_batch)
    small = run_batched(runner, inputs[: cfg.min_batch], cfg.min_batch, cfg.min_batch)
    diff = (logits - reference.float()).abs().max().item()
    diff = max(diff, (small - reference[: cfg.min_batch].float()).abs().max().item())
    agree = (logits.argmax(1) == reference.argmax(1)).float().mean().item()
    limit = cfg.fp32_max_abs_diff if spec.precision == "fp32" else cfg.half_max_abs_diff
    return Parity(
        samples=len(x),
        max_abs_diff=diff,
        top1_agreement=agree,
        max_abs_diff_limit=limit,
        min_top1_agreement=cfg.min_top1_agreement,
        passed=diff <= limit and agree >= cfg.min_top1_agreement,
    )


def _int8_parity(
    runner: Runner, x: torch.Tensor, reference: torch.Tensor, cfg: OptimizeConfig
) -> Parity:
    logits = run_batched(runner, x, cfg.max_batch, cfg.min_batch)
    agree = (logits.argmax(1) == reference[: len(x)].argmax(1)).float().mean().item()
    return Parity(
        samples=len(x),
        max_abs_diff=(logits - reference[: len(x)].float()).abs().max().item(),
        top1_agreement=agree,
        max_abs_diff_limit=None,
        min_top1_agreement=cfg.int8_min_agreement,
        passed=agree >= cfg.int8_min_agreement,
    )


def parity_message(name: str, precision: str, result: Parity) -> str:
    """One line naming the variant, the numbers and the limits that were crossed."""
    if precision == "int8":
        agree, need = result.top1_agreement, result.min_top1_agreement
        return (
            f"{name} (int8) not shipped: agreement {agree:.3f} < {need:.3f} by {need - agree:.3f} "
            f"on {result.samples} test images (optimize.int8_min_agreement)"
        )
    field_name = "fp32_max_abs_diff" if precision == "fp32" else "half_max_abs_diff"
    limit = result.max_abs_diff_limit or 0.0
    diff_op = ">" if result.max_abs_diff > limit else "<="
    agree_op = "<" if result.top1_agreement < result.min_top1_agreement else ">="
    return (
        f"{name} ({precision}) failed the parity gate on {result.samples} held-out images: "
        f"max |logit diff| {result.max_abs_diff:.3g} {diff_op} {limit:g} "
        f"(optimize.{field_name}), top-1 agreement {result.top1_agreement:.4f} {agree_op} "
        f"{result.min_top1_agreement:g} (optimize.min_top1_agreement)"
    )


def build_one(
    spec: Spec, ctx: BuildContext, x: torch.Tensor, reference: torch.Tensor
) -> VariantEntry:
    """Build, save, reload from the file, and gate one variant; raises on any failure
    (ParityError with the variant's record where only the gate refused it)."""
    path = ctx.workdir / spec.file
    start = time.perf_counter()
    details: dict[str, Any] = builder_for(spec)(spec, ctx, path)
    seconds = time.perf_counter() - start
    entry = VariantEntry(
        kind=spec.kind,
        file=spec.file,
        precision=spec.precision,  # type: ignore[arg-type]
        status="built",
        device=ctx.device.type,
        gpu=torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else None,
        cpu_capability=cpu_capability(),
        cpu_bf16_features=cpu_bf16_features(),
        size_bytes=sum((path.parent / f).stat().st_size for f in details.get("files", []))
        or path.stat().st_size,
        build_seconds=round(seconds, 3),
        details=details,
    )
    runner = load_variant_file(entry, path, ctx.device)
    entry = dataclasses.replace(entry, parity=parity(runner, spec, x, reference, ctx.cfg))
    assert entry.parity is not None
    if not entry.parity.passed:
        message = parity_message(spec.name, spec.precision, entry.parity)
        raise ParityError(message, dataclasses.replace(entry, status="failed", reason=message))
    return entry
