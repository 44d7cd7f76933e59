"""The promotion: what the benchmark's registry gate did (``steps.benchmark.champion``),
the contract ``steps.serve_check`` and its rollback read (inside ``benchmark.json``).

``promoted``: whether the alias moved to this run's ``version``; ``previous_version``: the
version that held it before this run and served, "" if none (what a rollback goes back
to); ``served_by_batch``: what the registered model runs per request size;
``serving_image`` and ``previous_serving_image``: the images that serve the version and the
previous one (cifar-serve for portable variants, cifar-optimize for torch ones). Without a
``decision`` MLflow tracking was off and nothing was registered.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass
from typing_extensions import Self  # typing.Self is 3.11+; the package supports 3.10

from steps.common.contracts.base import STRICT, Contract, Part

TRACKING_OFF = "MLflow tracking off: nothing registered"


@dataclass(frozen=True, config=STRICT)
class Challenger(Part):
    """This run's best variant: its accuracy and p50 at the gate batch, and where."""

    accuracy: float
    p50_ms: float
    gate_batch: int
    device_name: str
    variant: str


@dataclass(frozen=True, config=STRICT)
class Champion(Part):
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


@dataclass(frozen=True, config=STRICT)
class Decision(Part):
    """Whether the challenger takes the alias, with the margins and the numbers that said so."""

    challenger: Challenger
    champion: Champion | None
    accuracy_margin: float
    latency_margin: float
    promoted: bool
    reason: str


@dataclass(frozen=True, config=STRICT)
class Promotion(Contract):
    """What the gate did in the registry."""

    DOCUMENT: ClassVar[str] = "promotion"  # benchmark.json's "promotion"
    DESCRIPTION: ClassVar[str] = "the benchmark's registry decision"
    WRITER: ClassVar[str] = "steps.benchmark"

    promoted: bool
    reason: str
    decision: Decision | None = None
    registered_model: str = ""
    alias: str = ""
    version: str = ""
    model_uri: str = ""
    previous_version: str = ""
    served_by_batch: dict[int, str] = Field(default_factory=dict)
    serving_image: str = ""  # the image that serves ``version`` (the deploy's)
    previous_serving_image: str = ""  # and ``previous_version``'s (a rollback's)
    schema_version: int = 1

    @model_validator(mode="after")
    def _decided(self) -> Promotion:
        if self.promoted and not (self.decision and self.decision.promoted and self.version):
            raise ValueError("promoted is true without a decision to promote, or a version")
        return self

    @classmethod
    def untracked(cls) -> Self:
        """MLflow tracking off: nothing registered, nothing decided."""
        return cls(promoted=False, reason=TRACKING_OFF)

    @classmethod
    def of(
        cls,
        decision: Decision,
        registered_model: str,
        alias: str,
        version: str,
        model_uri: str = "",
        previous_version: str = "",
        served_by_batch: dict[int, str] | None = None,
        serving_image: str = "",
        previous_serving_image: str = "",
    ) -> Self:
        """The gate's ``decision`` on ``version`` of ``registered_model``."""
        return cls(
            promoted=decision.promoted,
            reason=decision.reason,
            decision=decision,
            registered_model=registered_model,
            alias=alias,
            version=version,
            model_uri=model_uri,
            previous_version=previous_version,
            served_by_batch=served_by_batch or {},
            serving_image=serving_image,
            previous_serving_image=previous_serving_image,
        )

    def verdict(self) -> str:
        """The decision as the report and the run's description say it: ``promoted: v1
        (first champion)``, ``not promoted: v4 (accuracy ... < ...)``, or without a version
        ``not promoted: <why>``."""
        outcome = "promoted" if self.promoted else "not promoted"
        if not self.version:
            return f"{outcome}: {self.reason}"
        return f"{outcome}: v{self.version} ({self.reason})"
