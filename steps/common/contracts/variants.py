"""``variants.json``: what ``steps.optimize`` built from one trained model, the contract it
hands ``steps.benchmark``, ``steps.predict`` and the registered model.

One ``VariantEntry`` per variant the config asked for: ``built`` (its file, where it was
built, its size and its parity with eager), ``skipped`` (cannot be built here: the reason)
or ``failed`` (the reason; ``parity`` where the gate refused it, ``failure`` where its
build process crashed, was stopped at its limit, exited or raised). Written last under
OPT_URI, once every built file is in place.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from steps.common.contracts.base import STRICT, Contract, Part
from steps.common.contracts.failure import ProcessFailure

Precision = Literal["fp32", "fp16", "bf16", "int8"]
BuildStatus = Literal["built", "skipped", "failed"]


@dataclass(frozen=True, config=STRICT)
class Parity(Part):
    """A variant's logits against eager's on held-out test images (``steps.optimize.gate``);
    INT8 is gated on top-1 agreement alone (no ``max_abs_diff_limit``)."""

    samples: int
    max_abs_diff: float
    top1_agreement: float
    max_abs_diff_limit: float | None
    min_top1_agreement: float
    passed: bool


@dataclass(frozen=True, config=STRICT)
class VariantEntry(Part):
    """One variant: how it loads (``kind``, ``file``, ``details``), where it was built
    (``device``, ``gpu``, the CPU's ISA and BF16 units), and how it came out."""

    kind: str
    file: str
    precision: Precision
    status: BuildStatus
    optional: bool = False  # its failure does not fail the step (optimize.optional_variants)
    reason: str = ""  # why it was skipped or failed; "" when built
    device: str | None = None
    gpu: str | None = None
    cpu_capability: str | None = None
    cpu_bf16_features: list[str] = Field(default_factory=list)
    size_bytes: int | None = None
    build_seconds: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)  # the builder's own record
    parity: Parity | None = None
    failure: ProcessFailure | None = None

    @property
    def built(self) -> bool:
        return self.status == "built"

    @property
    def files(self) -> list[str]:
        """Its files: ``file`` and any beside it (OpenVINO's .xml and .bin)."""
        return list(self.details.get("files") or [self.file])


@dataclass(frozen=True, config=STRICT)
class InputSpec(Part):
    """What every variant takes (``steps.common.trained_model``'s input contract)."""

    layout: str
    shape: list[int]
    dtype: str
    normalised: bool
    mean: list[float]
    std: list[float]
    note: str


@dataclass(frozen=True, config=STRICT)
class BatchRange(Part):
    """The dynamic batch range every variant was built for."""

    min: int
    opt: int
    max: int


@dataclass(frozen=True, config=STRICT)
class VariantsManifest(Contract):
    """``variants.json``: every variant of one trained model's weights, and what they take."""

    DOCUMENT: ClassVar[str] = "variants.json"
    DESCRIPTION: ClassVar[str] = "steps.optimize's manifest of the variants"
    WRITER: ClassVar[str] = "steps.optimize"

    optimized_uri: str
    model_uri: str
    weights_sha256: str
    architecture: str
    classes: list[str]
    input: InputSpec
    batch_range: BatchRange
    dataset_uri: str
    dataset_digest: str
    device: str
    environment: dict[str, Any]  # steps.common.device.environment: versions and hardware
    settings: dict[str, Any]  # optimize.* and the device: a rerun with the same reuses
    variants: dict[str, VariantEntry]
    schema_version: int = 1

    def built(self) -> dict[str, VariantEntry]:
        return {name: entry for name, entry in self.variants.items() if entry.built}

    def failed(self) -> dict[str, VariantEntry]:
        return {name: e for name, e in self.variants.items() if e.status == "failed"}
