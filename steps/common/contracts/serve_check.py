"""serve-check's ``summary.json``: the live check's verdict and numbers, the contract the
run's reviewers and tools read (``steps.serve_check.report`` writes it; the step's output
parameters ``passed``, ``accuracy`` and ``previous-version`` come from it)."""

from __future__ import annotations

from typing import ClassVar

from pydantic.dataclasses import dataclass

from steps.common.contracts.base import STRICT, Contract, Part


@dataclass(frozen=True, config=STRICT)
class ConcurrencyResult(Part):
    """One pass over the check's images at one concurrency (``steps.serve_check.load``)."""

    concurrency: int
    requests: int
    images: int
    accuracy: float
    p50_ms: float
    p99_ms: float
    requests_per_s: float
    images_per_s: float
    seconds: float


@dataclass(frozen=True, config=STRICT)
class ExpectedAccuracy(Part):
    """The benchmark's accuracy for what the registered model runs, as a range over the
    variants its dispatcher may answer an image with (``variants``: their names)."""

    low: float
    high: float
    variants: str


@dataclass(frozen=True, config=STRICT)
class ServeCheckSummary(Contract):
    """The check: passed or the failure and the rollback's decision; the accuracy served
    (the lowest over the concurrencies) against the benchmark's; each pass's numbers."""

    DOCUMENT: ClassVar[str] = "summary.json"  # serve-check's outputs
    DESCRIPTION: ClassVar[str] = "serve-check's summary"
    WRITER: ClassVar[str] = "steps.serve_check"

    seconds: float
    startup_seconds: float | None
    url: str
    passed: bool
    failure: str | None
    rollback: str | None  # the rollback's decision, one sentence (a failed check)
    accuracy: float | None  # null unless passed
    expected_accuracy: ExpectedAccuracy
    accuracy_margin: float
    images: int
    benchmark_images: int
    requests_per_pass: int
    protocol: str  # what the endpoint was spoken to in: v2, mlflow; "" if never asked
    by_concurrency: dict[int, ConcurrencyResult]
    version: str  # the registry version this run deployed, "" if none
    version_confirmed: bool  # GET /v2/models/<name> said that version is served
    previous_version: str
    schema_version: int = 1
