"""Every variant can be the champion (issue 42 item 0): whatever variant the served
dispatcher runs, the registered model's signature and both protocols take the same input,
uint8 ``[N, 32, 32, 3]``, and answer what that variant answers in this process.

A run with ``optimize.variants=[torchscript]`` used to register the FP32 torch.export
model: deployed, its live check (the Open Inference Protocol in UINT8) was refused with
``input 'images' is FP32; got "UINT8"``. Here a champion of each variant this machine
builds is registered (``log_served_model`` with that variant alone in its table), served
by ``python -m steps.serve`` on 127.0.0.1 (one server at a time) and asked through the
Open Inference Protocol, binary and JSON, and MLflow's ``/invocations``."""

from __future__ import annotations

import dataclasses
import json
import uuid

import mlflow
import numpy as np
import pytest
import torch

from steps.benchmark.registered_model import (
    SERVED_BY,
    log_served_model,
    portable_fastest,
    runtime,
    served_fastest,
)
from steps.common.config import PipelineConfig
from steps.common.contracts.benchmark import Measured, Timing
from steps.common.contracts.variants import VariantEntry
from steps.common.optimized_variants import fetch_variant, load_variant_file, read_variants
from steps.common.serving import runners, torch_runners
from steps.common.serving.client import ServingClient
from steps.common.trained_model import DTYPES, load_test_split, load_trained, normalize
from tests.helpers.contract_samples import VARIANTS as SAMPLE_VARIANTS
from tests.helpers.model_bundle import CPU_VARIANTS, PORTABLE_VARIANTS
from tests.helpers.serving_helpers import raw_post, serving

CPU = torch.device("cpu")
TENSORRT = ["tensorrt_fp32", "tensorrt_fp16", "tensorrt_int8"]
VARIANTS = ["eager", *CPU_VARIANTS, *PORTABLE_VARIANTS, *TENSORRT]
IMAGES = 6  # a handful: one batch, run by the one variant the champion holds


def reference(bundle, variant: str, images: torch.Tensor, tmp_path) -> np.ndarray:
    """The variant's own probabilities in this process, as the benchmark runs it: the
    pipeline's loader (``optimized_variants``) on ``normalize``d float NCHW images."""
    cfg = PipelineConfig()
    trained = load_trained(bundle.model_uri, cfg.storage, CPU)
    x = normalize(images, trained.mean, trained.std)
    if variant == "eager":
        run, dtype = trained.model, torch.float32
    else:
        doc = read_variants(bundle.optimized_uri, cfg.storage)
        entry = doc.variants[variant]
        path = fetch_variant(bundle.optimized_uri, entry, cfg.storage, tmp_path)
        run, dtype = load_variant_file(entry, path, CPU), DTYPES[entry.precision]
    with torch.inference_mode():
        return torch.softmax(run(x.to(dtype)).float(), 1).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_champion_of_each_variant_answers_uint8_in_both_protocols(
    bundle, mlflow_server, variant: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if variant.startswith("tensorrt") and not torch.cuda.is_available():
        pytest.skip(f"{variant} needs CUDA (TensorRT): this machine has no GPU")
    cfg = PipelineConfig()
    doc = read_variants(bundle.optimized_uri, cfg.storage)
    if variant != "eager":
        assert doc.variants[variant].built, doc.variants[variant]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    trained = load_trained(bundle.model_uri, cfg.storage, CPU)
    split = load_test_split(bundle.dataset_uri, cfg.storage)
    images = split.images[:IMAGES]  # uint8 NCHW, as staged
    pixels = images.permute(0, 2, 3, 1).contiguous().numpy()  # as a client sends them
    name = f"variant-{variant.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    info = log_served_model(trained, doc, {1: variant}, cfg.storage, images[:4], name)

    (spec,) = mlflow.models.get_model_info(info.model_uri).signature.inputs.inputs
    assert (spec.type, spec.shape) == (np.dtype(np.uint8), (-1, 32, 32, 3))
    expected = reference(bundle, variant, images, tmp_path)
    classes = expected.argmax(1)
    # Torch variants normalise as the benchmark does, bit for bit: the same logits. The
    # portable ones normalise in their runtime (OpenVINO inside its graph): to rounding.
    openvino = variant in doc.variants and doc.variants[variant].kind == "openvino"
    atol = 1e-4 if openvino else 1e-6

    with serving({"uri": mlflow_server.uri}, model=f"models:/{name}/1") as running:
        with ServingClient(running.url) as client:
            binary = client.infer(name, pixels)
            as_json = client.infer(name, pixels, binary=False)
        status, body = raw_post(running.url, json.dumps({"inputs": pixels.tolist()}).encode())
        code, output = running.stop()
    assert code == 0, output
    assert status == 200, body[:300]
    rows = json.loads(body)["predictions"]
    answers = {
        "oip binary": (binary["class"], binary["probabilities"]),
        "oip json": (as_json["class"], as_json["probabilities"]),
        "/invocations": (
            np.array([r["class"] for r in rows]),
            np.array([r["probabilities"] for r in rows], np.float32),
        ),
    }
    for protocol, (got_classes, got_probs) in answers.items():
        assert got_classes.tolist() == classes.tolist(), (variant, protocol)
        np.testing.assert_allclose(got_probs, expected, atol=atol, err_msg=protocol)


def test_the_served_normalisation_is_the_trainers_bit_for_bit() -> None:
    """``torch_runners.normalise`` of NHWC pixels equals ``trained_model.normalize`` of the
    same images in NCHW exactly, for the CIFAR-10 constants and others."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (17, 32, 32, 3), dtype=np.uint8)
    pixels[0] = 0
    pixels[1] = 255
    nchw = torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous()
    for mean, std in [
        ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
        ((0.5, 0.5, 0.5), (0.25, 0.5, 1.0)),
    ]:
        served = torch_runners.normalise(torch.from_numpy(pixels), mean, std)
        trained = normalize(nchw, mean, std)
        assert served.dtype == trained.dtype == torch.float32
        assert served.shape == trained.shape == (17, 3, 32, 32)
        assert torch.equal(served, trained)


def test_runners_names_the_same_torch_kinds_as_torch_runners() -> None:
    """``runners`` keeps its own copy (it must not import torch to know the names)."""
    assert runners.TORCH_KINDS == torch_runners.TORCH_KINDS
    assert not set(runners.TORCH_KINDS) & set(runners.PORTABLE_KINDS)


def measured(accuracy: float, p50: dict[int, float], precision: str = "fp32") -> Measured:
    def timing(ms: float) -> Timing:
        return Timing(1, ms, ms, ms, ms, ms, ms, 1000 / ms, 0.0, 1.0)

    return Measured(precision, accuracy, "", {b: timing(ms) for b, ms in p50.items()})


# variants.json of the four variants the cases below measure (their kinds decide)
VARIANTS_DOC = dataclasses.replace(
    SAMPLE_VARIANTS,
    variants={
        name: VariantEntry(kind, f"{name}.bin", "int8" if "int8" in name else "fp32", "built")
        for name, kind in {
            "torchscript": "torchscript",
            "aoti": "aoti",
            "onnx": "onnx",
            "openvino_int8": "openvino",
        }.items()
    },
)


@pytest.mark.parametrize(
    ("timings", "table", "kind", "image"),
    [
        (  # portable measured within the margin: they serve, in the torch-free image
            {
                "eager": (0.9, {1: 1.0, 64: 9.0}),
                "aoti": (0.9, {1: 0.1, 64: 1.0}),
                "onnx": (0.9, {1: 0.5, 64: 5.0}),
                "openvino_int8": (0.9, {1: 0.6, 64: 2.0}),
            },
            {1: "onnx", 64: "openvino_int8"},
            "portable",
            "cifar-serve",
        ),
        (  # the only portable one lost accuracy: the torch variants serve
            {
                "eager": (0.9, {1: 0.3, 64: 9.0}),
                "torchscript": (0.9, {1: 0.5, 64: 5.0}),
                "aoti": (0.9, {1: 0.4, 64: 1.0}),
                "openvino_int8": (0.5, {1: 0.1, 64: 0.5}),
            },
            {1: "eager", 64: "aoti"},
            "torch",
            "cifar-optimize",
        ),
        (  # optimize.variants=[torchscript]: the run
            {"eager": (0.9, {1: 1.0, 4: 2.0}), "torchscript": (0.9, {1: 0.5, 4: 3.0})},
            {1: "torchscript", 4: "eager"},
            "torch",
            "cifar-optimize",
        ),
    ],
    ids=["portable", "portable-too-inaccurate", "torchscript-only"],
)
def test_the_served_table_and_the_image_that_serves_it(
    timings: dict, table: dict[int, str], kind: str, image: str
) -> None:
    from types import SimpleNamespace

    report = SimpleNamespace(measured={n: measured(a, p) for n, (a, p) in timings.items()})
    assert served_fastest(report, VARIANTS_DOC, 0.01) == table
    assert bool(portable_fastest(report, VARIANTS_DOC, 0.01)) is (kind == "portable")
    assert runtime(VARIANTS_DOC, table) == kind
    assert PipelineConfig().images.image(SERVED_BY[kind]).split("/")[-1].startswith(f"{image}:")
