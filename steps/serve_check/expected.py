"""What the live check expects: the benchmark's report read through its contract
(``steps.common.contracts.benchmark``), how many of its test images are sent, and the
accuracy the registered model must show on them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from steps.common.config import PipelineConfig, StorageConfig
from steps.common.contracts.benchmark import BenchmarkReport, Measured, NotMeasured
from steps.common.per_image import mixed_accuracy_bounds
from steps.common.storage.uri import split_uri


class BadInput(ValueError):
    """A command-line value the check cannot use (exit 2)."""


class Expected(NamedTuple):
    """The accuracy range the served model must lie in, and the variants it runs."""

    low: float
    high: float
    variants: str


def read_benchmark(value: str, storage: StorageConfig) -> BenchmarkReport:
    """The benchmark's report from its text, its file, or the report URI holding it."""
    text: str | bytes = value
    where = "--benchmark"
    if not value.lstrip().startswith("{"):
        uri = value
        store, key = split_uri(uri, storage)
        if not store.exists(key):  # a report URI: the benchmark.json in it
            uri = f"{value.rstrip('/')}/{BenchmarkReport.DOCUMENT}"
            store, key = split_uri(uri, storage)
        if not store.exists(key):
            raise BadInput(f"--benchmark {uri}: no such file; pass the benchmark step's output")
        text, where = store.read_bytes(key), f"--benchmark {uri}"
    return BenchmarkReport.parse(text, where)


def check_count(cfg: PipelineConfig, report: BenchmarkReport, available: int) -> int:
    """How many test images the check sends: the benchmark's, or ``serving.check_samples``
    of them (never more than the benchmark measured, whose accuracy it must match)."""
    measured = report.test_images
    return min(cfg.serving.check_samples or measured, measured, available)


def expected_accuracy(report: BenchmarkReport, count: int | None = None) -> Expected:
    """The benchmark's accuracy for what the registered model runs
    (``promotion.served_by_batch``; the eager FP32 model where it registered no pyfunc)
    over its first ``count`` test images (default: all it measured)."""
    served = report.promotion.served_by_batch or {0: "eager"}
    return accuracy_range(report.variants, served, report.test_images, count)


def accuracy_range(
    variants: Mapping[str, Measured | NotMeasured],
    served_by_batch: Mapping[int, str],
    measured: int,
    count: int | None = None,
) -> Expected:
    """The accuracy, as a range, of the variants ``served_by_batch`` names over the first
    ``count`` of the ``measured`` test images. The dispatcher answers each request with
    the variant of its batch size, and concurrent requests may be batched onto another, so
    an image may be answered by any of them: from the per-image results, the range runs
    from the images every variant got right to those any one did
    (``per_image.mixed_accuracy_bounds``); a report without them (``correct`` null) gives
    the lowest and highest variant accuracy."""
    names = sorted(set(served_by_batch.values()))
    count = measured if count is None else count
    chosen = [variants.get(name) for name in names]
    if not all(isinstance(v, Measured) for v in chosen):
        raise BadInput(f"--benchmark: no measured accuracy for {', '.join(names)}")
    results = [v for v in chosen if isinstance(v, Measured)]
    per_image = [v.correct for v in results if v.correct is not None]
    if count < measured and len(per_image) < len(results):
        raise BadInput(
            f"serving.check_samples {count} < the benchmark's {measured} images, and its "
            "benchmark.json has no per-image results: set serving.check_samples to null"
        )
    if len(per_image) == len(results):
        low, high = mixed_accuracy_bounds(per_image, measured, count)
    else:
        values = [v.accuracy for v in results]
        low, high = min(values), max(values)
    return Expected(low, high, ", ".join(names))
