"""The documents steps hand each other, one typed contract each, written and read through
it (``base``): ``variants.json`` (``variants``: steps.optimize -> benchmark, predict, the
registered model), ``benchmark.json`` (``benchmark``: steps.benchmark -> serve_check,
predict) with the registry's ``promotion`` (``promotion``: -> serve_check's check and
rollback), serve-check's ``summary.json`` (``serve_check``), and how a child process's
work failed (``failure``). The served model's own ``serving.json`` is
``steps.common.serving.manifest`` (its code imports no ``steps``)."""

from steps.common.contracts.base import Contract, ContractError
from steps.common.contracts.benchmark import BenchmarkReport, Measured, NotMeasured, Timing
from steps.common.contracts.failure import ProcessFailure
from steps.common.contracts.promotion import (
    TRACKING_OFF,
    Challenger,
    Champion,
    Decision,
    Promotion,
)
from steps.common.contracts.serve_check import (
    ConcurrencyResult,
    ExpectedAccuracy,
    ServeCheckSummary,
)
from steps.common.contracts.variants import (
    BatchRange,
    InputSpec,
    Parity,
    VariantEntry,
    VariantsManifest,
)

__all__ = [
    "TRACKING_OFF",
    "BatchRange",
    "BenchmarkReport",
    "Challenger",
    "Champion",
    "ConcurrencyResult",
    "Contract",
    "ContractError",
    "Decision",
    "ExpectedAccuracy",
    "InputSpec",
    "Measured",
    "NotMeasured",
    "Parity",
    "ProcessFailure",
    "Promotion",
    "ServeCheckSummary",
    "Timing",
    "VariantEntry",
    "VariantsManifest",
]
