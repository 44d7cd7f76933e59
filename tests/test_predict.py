"""steps.predict: JPEG/PNG files of odd sizes are classified with the best variant that runs
here (one order over every variant, portable ones included, or the benchmark's per-batch
fastest with --report); a file that is not an image is a one-line error for that file only."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from steps import predict
from steps.common.config import PipelineConfig
from steps.common.models import CIFAR10_MEAN, CIFAR10_STD
from steps.common.optimized_variants import PREFERENCE, variant_order
from steps.common.trained_model import InputError, load_test_split, normalize
from steps.optimize.variants import NAMES
from tests.helpers.contract_samples import benchmark_with
from tests.helpers.model_bundle import BF16_CPU, FASTEST, Bundle
from tests.helpers.paths import REPO_ROOT


def predict_args(images: list[Path], model: str, optimized: str | None = None, **kw):
    return argparse.Namespace(
        images=[str(p) for p in images],
        model=model,
        optimized=optimized,
        variant=kw.get("variant"),
        report=kw.get("report"),
        top_k=kw.get("top_k", 1),
        config=None,
        overrides=[],
        debug=False,
    )


def _test_image(b: Bundle, index: int) -> tuple[np.ndarray, int]:
    split = load_test_split(b.dataset_uri, PipelineConfig().storage)
    return split.images[index].permute(1, 2, 0).numpy(), int(split.labels[index])


# name, size (width, height) the test image is scaled to (None: as is), format; or bytes
FILES = [
    ("exact.png", (32, 32), "PNG"),
    ("odd.png", (97, 97), "PNG"),
    ("small.jpg", (50, 50), "JPEG"),
    ("large.jpg", (640, 640), "JPEG"),
    ("rgba.png", (45, 45), "PNG-RGBA"),
    ("notes.txt", b"not an image\n", None),
    ("truncated.jpg", "TRUNCATED", None),
]


@pytest.fixture(scope="module")
def pictures(bundle: Bundle, tmp_path_factory: pytest.TempPathFactory) -> dict:
    directory = tmp_path_factory.mktemp("pictures")
    pixels, label = _test_image(bundle, 3)
    paths = {}
    for name, size, fmt in FILES:
        path = directory / name
        if isinstance(size, bytes):
            path.write_bytes(size)
        elif size == "TRUNCATED":
            Image.fromarray(pixels).resize((200, 200)).save(path, "JPEG")
            path.write_bytes(path.read_bytes()[:300])
        else:
            img = Image.fromarray(pixels).resize(size, Image.Resampling.NEAREST)
            if fmt == "PNG-RGBA":
                img, fmt = img.convert("RGBA"), "PNG"
            img.save(path, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
        paths[name] = path
    return {"paths": paths, "label": label, "pixels": pixels}


@pytest.fixture(scope="module")
def outcome(bundle: Bundle, pictures: dict) -> predict.PredictResult:
    images = [pictures["paths"][name] for name, _, _ in FILES]
    return predict.run(predict_args(images, bundle.model_uri, bundle.optimized_uri, top_k=3))


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("exact.png", None),
        ("odd.png", None),
        ("small.jpg", None),
        ("large.jpg", None),
        ("rgba.png", None),
        ("notes.txt", r"notes\.txt: not an image Pillow can read"),
        ("truncated.jpg", r"truncated\.jpg: cannot read \((?i:truncated)"),
    ],
)
def test_each_file_is_classified_or_named_in_one_error(
    outcome: predict.PredictResult,
    pictures: dict,
    bundle: Bundle,
    name: str,
    error: str | None,
) -> None:
    (prediction,) = [p for p in outcome.predictions if p.path.endswith(name)]
    if error:
        assert re.search(error, prediction.error)
        assert "\n" not in prediction.error
        assert prediction.top == []
        return
    classes = json.loads((Path(bundle.model_uri[7:]) / "model.json").read_text())["classes"]
    assert prediction.error is None
    assert len(prediction.top) == 3
    probs = [p for _, p in prediction.top]
    assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-6
    assert prediction.top[0][0] == classes[pictures["label"]]


def test_uses_the_fastest_variant_and_exits_2_for_bad_files(outcome: predict.PredictResult) -> None:
    assert outcome.variant == FASTEST
    assert outcome.exit_code == 2


def test_exact_size_picture_is_preprocessed_as_in_training(pictures: dict) -> None:
    loaded = predict.load_image(pictures["paths"]["exact.png"])
    expected = torch.from_numpy(pictures["pixels"]).permute(2, 0, 1)
    assert torch.equal(loaded, expected)
    assert torch.equal(
        normalize(loaded[None], CIFAR10_MEAN, CIFAR10_STD),
        normalize(expected[None].contiguous(), CIFAR10_MEAN, CIFAR10_STD),
    )


PORTABLE = ("openvino_int8", "onnx_int8", "openvino", "onnx")
AOTI = ("aoti", "aoti_bf16")


@pytest.mark.parametrize(
    ("optimized", "variant", "broken", "used"),
    [
        (False, None, (), "eager"),
        (True, None, (), FASTEST),
        (True, "torchscript", (), "torchscript"),
        (True, "eager", (), "eager"),
        (True, None, ("openvino_int8",), "onnx_int8"),  # cannot load here: the next one
        (True, None, PORTABLE, "aoti_bf16" if BF16_CPU else "aoti"),
        (True, None, (*PORTABLE, *AOTI), "torchscript"),
    ],
    ids=["eager", "fastest", "named", "named-eager", "next", "no-portable", "no-aoti"],
)
def test_variant_choice_falls_back(
    bundle: Bundle,
    pictures: dict,
    tmp_path: Path,
    optimized: bool,
    variant: str | None,
    broken: tuple[str, ...],
    used: str,
) -> None:
    opt = bundle.root / "opt"
    if broken:
        opt = Path(shutil.copytree(opt, tmp_path / "opt"))
        doc = json.loads((opt / "variants.json").read_text())
        for name in broken:
            if name in AOTI:  # compiled for another CPU
                doc["variants"][name]["cpu_capability"] = "SOME_OTHER_ISA"
            elif name in doc["variants"]:  # a portable file built on a GPU machine
                doc["variants"][name]["device"] = "cuda"
        (opt / "variants.json").write_text(json.dumps(doc))
    args = predict_args(
        [pictures["paths"]["odd.png"]],
        bundle.model_uri,
        opt.as_uri() if optimized else None,
        variant=variant,
    )
    result = predict.run(args)
    assert result.variant == used
    assert result.exit_code == 0


def test_every_variant_optimize_makes_has_a_place_in_the_order() -> None:
    # A variant missing from PREFERENCE would only be tried after all others.
    assert sorted(PREFERENCE) == sorted(NAMES)


@pytest.mark.parametrize(
    ("built", "order"),
    [
        (["export", "torchscript", "aoti", "onnx"], ["onnx", "aoti", "torchscript", "export"]),
        (["export", "openvino", "onnx_int8"], ["onnx_int8", "openvino", "export"]),
        (["tflite_int4", "export", "tensorrt_fp16"], ["tensorrt_fp16", "export", "tflite_int4"]),
    ],
    ids=["cpu-fp32", "int8-first", "unknown-last"],
)
def test_variant_order_without_a_benchmark(built: list[str], order: list[str]) -> None:
    assert variant_order(built) == order


@pytest.mark.parametrize(
    ("kw", "optimized", "match"),
    [
        ({"variant": "aoti"}, False, r"--variant aoti needs --optimized"),
        ({"variant": "tflite"}, True, r"--variant tflite: not in .* has torchscript, export, aoti"),
        ({"top_k": 0}, False, r"--top-k 0: must be 1 or more"),
    ],
)
def test_bad_options_are_user_errors(
    bundle: Bundle,
    pictures: dict,
    kw: dict,
    optimized: bool,
    match: str,
) -> None:
    opt = bundle.optimized_uri if optimized else None
    args = predict_args([pictures["paths"]["odd.png"]], bundle.model_uri, opt, **kw)
    with pytest.raises(InputError, match=match):
        predict.run(args)


def test_cli_prints_a_line_per_picture_and_one_error_line(bundle: Bundle, pictures: dict) -> None:
    good, bad = pictures["paths"]["small.jpg"], pictures["paths"]["notes.txt"]
    command = [
        sys.executable,
        "-m",
        "steps.predict",
        str(good),
        str(bad),
        "--model",
        bundle.model_uri,
    ]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert re.fullmatch(rf"{re.escape(str(good))}: \w+ \d+\.\d%\n", done.stdout)
    errors = [line for line in done.stderr.splitlines() if line.startswith("predict: error:")]
    assert errors == [f"predict: error: {bad}: not an image Pillow can read (JPEG, PNG, ...)"]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("count", "used"), [(1, "onnx_int8"), (3, "onnx_int8"), (4, "openvino"), (40, "openvino")]
)
def test_report_dispatches_per_batch_size(
    bundle: Bundle,
    pictures: dict,
    tmp_path: Path,
    count: int,
    used: str,
) -> None:
    """With --report, each batch runs on the variant the benchmark measured fastest at the
    nearest measured batch size at or below it; the classes match eager's."""
    report = benchmark_with({1: "onnx_int8", 4: "openvino"})  # a valid one: its table matters
    (tmp_path / "benchmark.json").write_bytes(report.dumps())
    images = [pictures["paths"]["odd.png"]] * count
    args = predict_args(images, bundle.model_uri, bundle.optimized_uri, report=str(tmp_path))
    result = predict.run(args)
    assert result.variant == "dispatch (bs 1: onnx_int8, bs 4: openvino)"
    from steps.common.serving.runners import Dispatcher

    assert (
        Dispatcher({"onnx_int8": id, "openvino": id}, {1: "onnx_int8", 4: "openvino"}).choose(count)
        == used
    )
    eager = predict.run(predict_args(images[:1], bundle.model_uri))
    assert {p.top[0][0] for p in result.predictions} == {eager.predictions[0].top[0][0]}
