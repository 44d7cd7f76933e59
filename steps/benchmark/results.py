"""What the benchmark found, as types: each variant's accuracy and its timing per batch size,
the fastest variant per batch size, and what the registry gate decided.

``BenchmarkReport.document()`` is ``benchmark.json``, the one place these become string
keys: ``steps.serve_check`` and ``steps.predict`` read that document by its keys (a step
imports no other step), so its layout is the contract and stays as it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

TRACKING_OFF = "MLflow tracking off: nothing registered"


@dataclass(frozen=True)
class Timing:
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


@dataclass(frozen=True)
class Measured:
    """A variant that ran here: its top-1 accuracy on the test images, which of them it got
    right (``steps.common.per_image``: the live check's subsets), its timing per batch size."""

    precision: str
    accuracy: float
    correct: str
    batches: dict[int, Timing]

    def document(self) -> dict[str, Any]:
        return {
            "status": "measured",
            "precision": self.precision,
            "accuracy": self.accuracy,
            "correct": self.correct,
            "batches": {str(b): asdict(t) for b, t in self.batches.items()},
        }


@dataclass(frozen=True)
class NotMeasured:
    """A variant that did not run here: ``steps.optimize`` skipped it or it failed there
    (``status`` as variants.json says), or it cannot run on this machine (``unavailable``)."""

    status: str
    reason: str

    def document(self) -> dict[str, Any]:
        return asdict(self)


def fastest_by_batch(
    measured: dict[str, Measured], margin: float, among: tuple[str, ...] | None = None
) -> dict[int, str]:
    """Per batch size, the variant with the lowest p50 among those within ``margin`` of
    eager's accuracy (and named in ``among``, if given); empty where none is."""
    floor = measured["eager"].accuracy - margin
    eligible = [
        name
        for name, variant in measured.items()
        if variant.accuracy >= floor and (among is None or name in among)
    ]
    if not eligible:
        return {}
    return {
        batch: min(eligible, key=lambda n, b=batch: measured[n].batches[b].p50_ms)
        for batch in measured["eager"].batches
    }


@dataclass(frozen=True)
class Challenger:
    """This run's best variant: its accuracy and p50 at the gate batch, and where."""

    accuracy: float
    p50_ms: float
    gate_batch: int
    device_name: str
    variant: str


@dataclass(frozen=True)
class Champion:
    """The version holding the alias, as its tags describe it (the latency tags may be
    missing on a version registered without them)."""

    version: str
    accuracy: float
    p50_ms: float | None = None
    gate_batch: int | None = None
    device_name: str | None = None
    dataset_digest: str | None = None
    mlflow_run_id: str | None = None
    previous_champion: str | None = None


@dataclass(frozen=True)
class Decision:
    """Whether the challenger takes the alias, with the margins and the numbers that said so."""

    challenger: Challenger
    champion: Champion | None
    accuracy_margin: float
    latency_margin: float
    promoted: bool
    reason: str


@dataclass(frozen=True)
class Promotion:
    """What the gate did in the registry (``steps.benchmark.champion``). Without a decision
    MLflow tracking was off and nothing was registered. ``previous_version``: the version
    that held the alias before this run and served, "" if none (what a rollback goes back
    to); ``served_by_batch``: what the registered model runs per request size;
    ``serving_image`` and ``previous_serving_image``: the images that serve the version and
    the previous one (cifar-serve for portable variants, cifar-optimize for torch ones)."""

    decision: Decision | None = None
    registered_model: str = ""
    alias: str = ""
    version: str = ""
    model_uri: str = ""
    previous_version: str = ""
    served_by_batch: dict[int, str] = field(default_factory=dict)
    serving_image: str = ""
    previous_serving_image: str = ""

    @property
    def promoted(self) -> bool:
        return self.decision is not None and self.decision.promoted

    @property
    def reason(self) -> str:
        return self.decision.reason if self.decision else TRACKING_OFF

    def verdict(self) -> str:
        """The decision as the report and the run's description say it: ``promoted: v1
        (first champion)``, ``not promoted: v4 (accuracy ... < ...)``, or without a version
        ``not promoted: <why>``."""
        outcome = "promoted" if self.promoted else "not promoted"
        if not self.version:
            return f"{outcome}: {self.reason}"
        return f"{outcome}: v{self.version} ({self.reason})"

    def document(self) -> dict[str, Any]:
        if self.decision is None:
            return {"promoted": False, "reason": TRACKING_OFF}
        return {
            **asdict(self.decision),
            "registered_model": self.registered_model,
            "alias": self.alias,
            "version": self.version,
            "model_uri": self.model_uri,
            "previous_version": self.previous_version,
            "served_by_batch": {str(b): n for b, n in self.served_by_batch.items()},
            "serving_image": self.serving_image,
            "previous_serving_image": self.previous_serving_image,
        }


@dataclass(frozen=True)
class BenchmarkReport:
    """Every variant measured (or why not) on one device, the winners, and the gate's outcome."""

    FORMAT_VERSION: ClassVar[int] = 1

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
    variants: dict[str, Measured | NotMeasured]
    gate_batch: int
    best_variant: str
    fastest_by_batch: dict[int, str]
    slower_than_eager: list[str]
    promotion: Promotion = field(default_factory=Promotion)

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

    def document(self) -> dict[str, Any]:
        """``benchmark.json``."""
        return {
            "format_version": self.FORMAT_VERSION,
            "created_at": self.created_at,
            "model_uri": self.model_uri,
            "architecture": self.architecture,
            "optimized_uri": self.optimized_uri,
            "dataset_uri": self.dataset_uri,
            "dataset_digest": self.dataset_digest,
            "test_images": self.test_images,
            "device": self.device,
            "device_name": self.device_name,
            "environment": self.environment,
            "load_average": self.load_average,
            "settings": self.settings,
            "variants": {n: v.document() for n, v in self.variants.items()},
            "gate_batch": self.gate_batch,
            "best_variant": self.best_variant,
            "fastest_by_batch": {str(b): n for b, n in self.fastest_by_batch.items()},
            "slower_than_eager": self.slower_than_eager,
            "promotion": self.promotion.document(),
        }
