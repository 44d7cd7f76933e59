"""Sample documents of each contract (steps.common.contracts; serving.json's too), as the
steps write them: for the contracts' tests, and for a test that needs a valid document
whose numbers do not matter (a benchmark.json of a given dispatch table)."""

from __future__ import annotations

import dataclasses

from steps.common.contracts import (
    BatchRange,
    BenchmarkReport,
    Challenger,
    ConcurrencyResult,
    Decision,
    ExpectedAccuracy,
    InputSpec,
    Measured,
    NotMeasured,
    Parity,
    ProcessFailure,
    Promotion,
    ServeCheckSummary,
    Timing,
    VariantEntry,
    VariantsManifest,
)
from steps.common.serving.serving_manifest import (
    ServedBatchRange,
    ServedVariant,
    ServingManifest,
)

TIMING = Timing(12, 1.0, 1.2, 1.5, 1.1, 0.9, 1.6, 8000.0, 3.5, 1.25)
PARITY = Parity(64, 1e-6, 1.0, 1e-3, 0.995, True)
SEGV = ProcessFailure("crashed", "build: process crashed (SIGSEGV, in ...)", signal="SIGSEGV",
                      frame='File "x.py", line 3 in f')  # fmt: skip
VARIANTS = VariantsManifest(
    optimized_uri="s3://b/run/optimized",
    model_uri="s3://b/run/model",
    weights_sha256="ab" * 32,
    architecture="resnet9",
    classes=["airplane", "automobile"],
    input=InputSpec("NCHW", [-1, 3, 32, 32], "float32", True, [0.5] * 3, [0.25] * 3, "n"),
    batch_range=BatchRange(1, 64, 256),
    dataset_uri="s3://b/datasets/cifar10/x",
    dataset_digest="x",
    device="cpu",
    environment={"torch": "2.11.0"},
    settings={"variants": ["onnx"], "device": "cpu"},
    variants={
        "onnx": VariantEntry("onnx", "model.onnx", "fp32", "built", device="cpu",
                             size_bytes=1000, build_seconds=1.5, details={"threads": 2},
                             parity=PARITY),
        "aoti": VariantEntry("aoti", "aoti.pt2", "fp32", "failed", optional=True,
                             reason=SEGV.message, failure=SEGV),
        "tensorrt_fp16": VariantEntry("tensorrt", "tensorrt_fp16.ep", "fp16", "skipped",
                                      optional=True, reason="no CUDA device"),
    },
)  # fmt: skip
DECISION = Decision(Challenger(0.95, 1.0, 256, "cpu", "onnx"), None, 0.002, 0.1, True, "first")
PROMOTION = Promotion.of(DECISION, "cifar10-classifier", "champion", "3", "models:/m/3", "2",
                         {1: "onnx", 64: "onnx"})  # fmt: skip
BENCHMARK = BenchmarkReport(
    created_at="2025-01-01T00:00:00+00:00", model_uri="s3://b/run/model",
    architecture="resnet9", optimized_uri="s3://b/run/optimized",
    dataset_uri="s3://b/datasets/cifar10/x", dataset_digest="x", test_images=4, device="cpu",
    device_name="cpu", environment={"torch": "2.11.0"}, load_average=[0.5, 0.4, 0.3],
    settings={"rounds": 3},
    variants={
        "eager": Measured("fp32", 0.75, "wA==", {1: TIMING, 64: TIMING}),
        "onnx": Measured("fp32", 0.75, "wA==", {1: TIMING, 64: TIMING}),
        "aoti": NotMeasured("failed", SEGV.message, SEGV),
        "tensorrt_fp16": NotMeasured("skipped", "no CUDA device"),
    },
    gate_batch=64, best_variant="onnx", fastest_by_batch={1: "onnx", 64: "onnx"},
    slower_than_eager=[], promotion=PROMOTION,
)  # fmt: skip
RESULT = ConcurrencyResult(1, 3, 40, 0.75, 2.0, 3.0, 100.0, 1000.0, 0.03)
SUMMARY = ServeCheckSummary(
    seconds=2.5, startup_seconds=0.4, url="http://127.0.0.1:8080", passed=True, failure=None,
    rollback=None, accuracy=0.75, expected_accuracy=ExpectedAccuracy(0.75, 0.75, "onnx"),
    accuracy_margin=0.002, images=40, benchmark_images=4, requests_per_pass=2, protocol="v2",
    by_concurrency={1: RESULT}, version="3", version_confirmed=True, previous_version="2",
)  # fmt: skip
SERVING = ServingManifest(
    classes=["airplane", "automobile"], mean=[0.5] * 3, std=[0.25] * 3, threads=2,
    batch_range=ServedBatchRange(1, 256), runtime="portable",
    variants={"onnx": ServedVariant("onnx", "model.onnx", "fp32", ["model.onnx"], {})},
    fastest_by_batch={1: "onnx", 64: "onnx"},
)  # fmt: skip


def benchmark_with(fastest: dict[int, str]) -> BenchmarkReport:
    """A benchmark.json whose dispatch table is ``fastest``; its numbers are made up."""
    names = {"eager", *fastest.values()}
    measured = {n: Measured("fp32", 1.0, None, {b: TIMING for b in fastest}) for n in names}
    gate = max(fastest)
    return dataclasses.replace(
        BENCHMARK, variants=measured, gate_batch=gate, best_variant=fastest[gate],
        fastest_by_batch=fastest, promotion=Promotion.untracked(),
    )  # fmt: skip
