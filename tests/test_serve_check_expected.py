"""What serve-check expects and writes, without an endpoint: per-image results round-trip,
the expected accuracy range holds any mix of the variants the server dispatched to, and
the run's description keeps the benchmark's block and one endpoint block."""

from __future__ import annotations

import numpy as np
import pytest

from steps.common.contracts.benchmark import Measured
from steps.common.per_image import mixed_accuracy_bounds, pack_correct, prefix_accuracy
from steps.serve_check.expected import accuracy_range
from steps.serve_check.report import merged_note


@pytest.mark.parametrize(
    ("correct", "count", "accuracy"),
    [([1, 1, 0, 0, 0, 0, 0, 0, 0, 1], 2, 1.0), ([1, 1, 0, 0, 0, 0, 0, 0, 0, 1], 10, 0.3),
     ([0, 1, 1, 1, 0, 1, 1, 1, 1], 9, 7 / 9), ([0, 1, 1, 1, 0, 1, 1, 1, 1], 4, 0.75)],
    ids=["prefix-2", "all-10", "all-9-not-a-byte", "prefix-4"],
)  # fmt: skip
def test_per_image_results_round_trip(correct: list[int], count: int, accuracy: float) -> None:
    packed = pack_correct(np.asarray(correct, dtype=bool))
    assert prefix_accuracy(packed, len(correct), count) == pytest.approx(accuracy)
    with pytest.raises(ValueError, match=r"the benchmark measured 1\.\."):
        prefix_accuracy(packed, len(correct), len(correct) + 1)


def test_the_expected_range_holds_any_mix_of_the_dispatched_variants() -> None:
    """Two variants of equal accuracy (0.5) that err on different images: a server that
    answers image 1 with the first and image 2 with the second is right on 3 of 4 (0.75),
    one that does the opposite on 1 of 4; both are what the model serves, so both pass.
    The range was the variants' lowest and highest accuracy (0.5 .. 0.5) and refused them:
    seen as a failed serve-check of the TrainJob pipeline (served 0.2275, expected 0.2250
    within 0.002, onnx and openvino_int8 by batch size)."""
    first = pack_correct(np.array([1, 1, 0, 0], dtype=bool))
    second = pack_correct(np.array([1, 0, 1, 0], dtype=bool))
    variants = {
        "onnx": Measured("fp32", 0.5, first, {}),
        "openvino_int8": Measured("int8", 0.5, second, {}),
    }
    served = {1: "onnx", 8: "openvino_int8"}
    assert accuracy_range(variants, served, 4) == (0.25, 0.75, "onnx, openvino_int8")
    assert accuracy_range(variants, served, 4, 2) == (0.5, 1.0, "onnx, openvino_int8")
    assert mixed_accuracy_bounds([first], 4, 4) == (0.5, 0.5)  # one variant: its accuracy


@pytest.mark.parametrize(
    ("note", "lines", "merged"),
    [
        ("", ["**Endpoint** a"], "**Endpoint** a"),
        ("**Test accuracy** 1\n", ["**Endpoint** a"], "**Test accuracy** 1\n\n**Endpoint** a"),
        ("x\n\n**Endpoint** old\n\n**Rollback** old", ["**Endpoint** b"], "x\n\n**Endpoint** b"),
    ],
    ids=["empty", "after-the-benchmark", "a-retry-replaces"],
)
def test_the_description_keeps_the_benchmark_and_one_endpoint_block(
    note: str, lines: list[str], merged: str
) -> None:
    assert merged_note(note, lines) == merged
