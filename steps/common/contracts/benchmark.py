"""``benchmark.json``: what ``steps.benchmark`` measured, the contract it hands
``steps.serve_check`` (the accuracy to expect, the promotion to confirm or roll back) and
``steps.predict`` (the fastest variant per batch size).

Each variant's accuracy and its timing per batch size (``Measured``), or why it was not
measured (``NotMeasured``: skipped or failed in ``steps.optimize``, unavailable here, or
failed when the benchmark first loaded and ran it in a child process); the fastest
variant per batch size; and what the registry gate decided (``Promotion``).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from steps.common.contracts.base import STRICT, Contract, Part
from steps.common.contracts.failure import ProcessFailure
from steps.common.contracts.promotion import Promotion


@dataclass(frozen=True, config=STRICT)
class Timing(Part):
    """One variant at one batch size (``steps.benchmark.timing.summarize``), and eager's
    p50 over its own at that size."""

    iters: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    images_per_s: float
    peak_mem_mb: float
    speedup_vs_eager: float


@dataclass(frozen=True, config=STRICT)
class Measured(Part):
    """A variant that ran here: its top-1 accuracy on the test images, which of them it got
    right (``steps.common.per_image``: the live check's subsets; null where not recorded),
    its timing per batch size."""

    precision: str
    accuracy: float
    correct: str | None
    batches: dict[int, Timing]
    status: Literal["measured"] = "measured"


@dataclass(frozen=True, config=STRICT)
class NotMeasured(Part):
    """A variant that did not run here: ``steps.optimize`` skipped it or it failed there
    (``status`` as variants.json says), it cannot run on this machine (``unavailable``), or
    its first load and run in a child process failed here (``failed``, with ``failure``)."""

    status: Literal["skipped", "failed", "unavailable"]
    reason: str
    failure: ProcessFailure | None = None


Variant = Annotated[Measured | NotMeasured, Field(discriminator="status")]


@dataclass(frozen=True, config=STRICT)
class BenchmarkReport(Contract):
    """Every variant measured (or why not) on one device, the winners, and the gate's outcome."""

    DOCUMENT: ClassVar[str] = "benchmark.json"
    DESCRIPTION: ClassVar[str] = "steps.benchmark's report"
    WRITER: ClassVar[str] = "steps.benchmark"

    created_at: str
    model_uri: str
    architecture: str
    optimized_uri: str
    dataset_uri: str
    dataset_digest: str
    test_images: int
    device: str
    device_name: str
    environment: dict[str, Any]  # steps.common.device.environment: versions and hardware
    load_average: list[float] | None
    settings: dict[str, Any]  # the benchmark.* timing fields, the clock, the memory method
    variants: dict[str, Variant]
    gate_batch: int
    best_variant: str
    fastest_by_batch: dict[int, str]
    slower_than_eager: list[str]
    promotion: Promotion = Field(default_factory=Promotion.untracked)
    schema_version: int = 1

    @property
    def measured(self) -> dict[str, Measured]:
        return {n: v for n, v in self.variants.items() if isinstance(v, Measured)}

    @property
    def not_measured(self) -> dict[str, NotMeasured]:
        return {n: v for n, v in self.variants.items() if isinstance(v, NotMeasured)}

    @property
    def best(self) -> Measured:
        return self.measured[self.best_variant]

    @property
    def best_at_gate(self) -> Timing:
        return self.best.batches[self.gate_batch]
