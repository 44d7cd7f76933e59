"""The champion serves: the benchmark registers a pyfunc holding the fastest portable
variants and the dispatcher, ``mlflow models serve -m models:/...@champion`` (the real CLI,
against the tests' real MLflow server) answers a batch of uint8 images with classes, names
and probabilities, and a request of the wrong shape or dtype gets a 4xx naming the
expected input, not a stack trace: nor a 200 with wrong classes for normalised floats,
which MLflow's own parse would cast to 0."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from mlflow.exceptions import MlflowException

from steps.benchmark.registered_model import CLASSIFIER, CODE_PATHS
from steps.common.config import PipelineConfig
from steps.common.serving.strict_input import exact_array, install
from steps.common.trained_model import load_test_split, load_trained, normalize
from tests.helpers.model_bundle import Bundle
from tests.helpers.serving_helpers import NAME


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/invocations",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_champion_is_the_serving_pyfunc(champion: dict) -> None:
    client = mlflow.MlflowClient(champion["uri"])
    version = client.get_model_version_by_alias(NAME, "champion")
    assert version.tags["serving"].startswith("pyfunc: bs 1 ")
    info = mlflow.models.get_model_info(f"models:/{NAME}@champion")
    (spec,) = info.signature.inputs.inputs
    assert (spec.type, spec.shape) == (np.dtype(np.uint8), (-1, 32, 32, 3))
    assert {c["name"] for c in info.signature.outputs.to_dict()} == {
        "class",
        "class_name",
        "probabilities",
    }
    assert info.saved_input_example_info is not None


def test_served_batch_matches_eager(served: str, bundle: Bundle) -> None:
    cfg = PipelineConfig()
    split = load_test_split(bundle.dataset_uri, cfg.storage)
    pixels = split.images[:20].permute(0, 2, 3, 1).numpy()
    status, body = _post(served, {"inputs": pixels.tolist()})
    assert status == 200, body
    rows = body["predictions"]
    assert len(rows) == 20
    trained = load_trained(bundle.model_uri, cfg.storage, torch.device("cpu"))
    with torch.no_grad():
        probs = torch.softmax(
            trained.model(normalize(split.images[:20], trained.mean, trained.std)), 1
        )
    assert [r["class"] for r in rows] == probs.argmax(1).tolist()
    assert [r["class_name"] for r in rows] == [trained.classes[i] for i in probs.argmax(1)]
    got = np.array([r["probabilities"] for r in rows])
    np.testing.assert_allclose(got.sum(1), 1, atol=1e-4)
    assert np.abs(got - probs.numpy()).max() < 0.05  # INT8 may serve: close, not exact


@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        (np.zeros((2, 3, 32, 32), np.uint8).tolist(), "(-1, 32, 32, 3)"),  # NCHW, not NHWC
        (np.zeros((2, 32, 32), np.uint8).tolist(), "(-1, 32, 32, 3)"),  # no channels
        (np.full((2, 32, 32, 3), 300).tolist(), "uint8"),  # not a uint8 value
        (np.full((2, 32, 32, 3), -1).tolist(), "uint8"),
        (np.full((2, 32, 32, 3), 0.5).tolist(), "non-integer values such as 0.5"),  # x / 255
        (np.full((2, 32, 32, 3), -1.25).tolist(), "non-integer values such as -1.25"),  # normalised
        (np.full((2, 32, 32, 3), 254.9).tolist(), "not normalised floats"),
        ([[[[1, 2, 3]] * 32] * 32, [[[1, 2]] * 32] * 32], "unequal lengths"),  # ragged
        (np.full((1, 32, 32, 3), "1").tolist(), "non-numeric"),
    ],
    ids=[
        "nchw",
        "no-channels",
        "over-255",
        "negative",
        "unit-floats",
        "normalised-floats",
        "fractional",
        "ragged",
        "strings",
    ],
)
def test_bad_request_is_a_400_naming_what_is_expected(
    served: str, inputs: list, named: str
) -> None:
    # MLflow's scoring server casts JSON numbers to the signature's uint8 with numpy before
    # the model sees them (0.5 would arrive as 0 and answer 200): the served model installs
    # a strict parse for its own spec (steps.common.serving.strict_input).
    status, body = _post(served, {"inputs": inputs})
    assert status == 400, body
    message = body["message"]
    assert named in message, message[-300:]
    assert message.startswith("expected uint8 RGB images of shape (-1, 32, 32, 3)"), message[:300]
    assert "\n" not in message and len(message) < 300, message[:300]
    assert "Traceback" not in json.dumps(body)


def test_whole_number_floats_are_pixels(served: str) -> None:
    # 7.0 is the pixel 7: JSON writers may emit it so; refusing it would help no one.
    pixels = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3))
    as_ints = _post(served, {"inputs": pixels.tolist()})
    as_floats = _post(served, {"inputs": pixels.astype(float).tolist()})
    assert as_ints[0] == as_floats[0] == 200, (as_ints, as_floats)
    assert as_ints[1] == as_floats[1]


@pytest.mark.parametrize(
    ("data", "got"),
    [
        ([[1, 2], [3, 4]], None),
        ([[1.0, 255.0], [0.0, 4.0]], None),
        ([[1, 2], [3, 256]], "values from 1 to 256, outside 0..255"),
        ([[1, 2], [3, -1]], "values from -1 to 3, outside 0..255"),
        ([[0.5, 2], [3, 4]], "non-integer values such as 0.5"),
        ([[float("nan"), 2], [3, 4]], "non-integer values such as nan"),
        ([[float("inf"), 2], [3, 4]], "non-integer values such as inf"),
        ([[1, 2, 3], [3, 4, 5]], "shape (2, 3)"),
        ([1, 2], "shape (2,)"),
        ([[1, 2], [3]], "nested lists of unequal lengths"),
        ([[True, False], [True, True]], "non-numeric values (numpy dtype bool)"),
        ([[1, True], [3, 4]], "booleans among the numbers (true/false are not pixel values)"),
        ([[7.0, False], [3, 4]], "booleans among the numbers (true/false are not pixel values)"),
        ([[None, 1], [2, 3]], "non-numeric values (numpy dtype object)"),
    ],
    ids=[
        "ints",
        "whole-floats",
        "over",
        "under",
        "fraction",
        "nan",
        "inf",
        "columns",
        "rank",
        "ragged",
        "bool",
        "bool-among-ints",
        "bool-among-floats",
        "null",
    ],
)
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a refusal, not a warning in the log
def test_exact_array_refuses_what_a_cast_would_change(data: list, got: str | None) -> None:
    if got is None:
        values = exact_array(data, np.dtype(np.uint8), (-1, 2), "pairs")
        assert values.dtype == np.uint8
        np.testing.assert_array_equal(values, np.asarray(data))
        return
    with pytest.raises(MlflowException, match=re.escape(f"expected pairs; got {got}")) as err:
        exact_array(data, np.dtype(np.uint8), (-1, 2), "pairs")
    assert err.value.get_http_status_code() == 400


def test_install_is_scoped_to_the_served_specs() -> None:
    from mlflow.types import TensorSpec
    from mlflow.utils import proto_json_utils

    before = proto_json_utils.convert_data_type
    # Logging the champion in this process (the fixtures) loaded the model: installed once.
    mlflows = getattr(before, "wrapped", before)
    assert mlflows.__module__ == "mlflow.utils.proto_json_utils"
    pairs = TensorSpec(np.dtype(np.uint8), (-1, 2))
    int16s = TensorSpec(np.dtype(np.int16), (-1, 1))
    try:
        proto_json_utils.convert_data_type = mlflows
        install(pairs, "pairs")
        install(int16s, "int16s")  # a second model in the same process
        install(pairs, "pairs")  # the first loaded again: one wrapper, each spec once
        assert proto_json_utils.convert_data_type.wrapped is mlflows
        assert len(proto_json_utils.convert_data_type.strict_specs) == 2
        with pytest.raises(MlflowException, match=r"expected pairs; got non-integer .* 0\.5"):
            proto_json_utils.convert_data_type([[0.5, 1]], pairs)
        with pytest.raises(MlflowException, match=r"expected int16s; got values from 1 to 40000"):
            proto_json_utils.convert_data_type([[1], [40000]], int16s)
        other = TensorSpec(np.dtype(np.uint8), (-1, 3))  # another model's spec: MLflow's cast
        np.testing.assert_array_equal(
            proto_json_utils.convert_data_type([[0.5, 1, 2]], other), [[0, 1, 2]]
        )
    finally:
        proto_json_utils.convert_data_type = before


def test_served_code_imports_neither_torch_nor_steps() -> None:
    # What ``mlflow models serve`` executes: classifier.py and its code_paths, alone. A
    # portable champion needs no torch (torch_runners is imported only for a torch
    # variant, and says so where torch is missing); torch_runners needs no steps.
    folder = str(Path(CLASSIFIER).parent)
    portable = [p.stem for p in CODE_PATHS if p.stem != "torch_runners"]
    no_torch = (
        "import sys\n"
        "from pathlib import Path\n"
        "sys.modules['torch'] = sys.modules['steps'] = None  # any import of them fails\n"
        f"sys.path.insert(0, {folder!r})\n"
        f"import {', '.join(portable)}, classifier\n"
        "print('loaded')\n"
        "try:\n"
        "    runners.load_runner('torchscript', Path('m.pt'), {}, 1, ((0, 0, 0), (1, 1, 1)))\n"
        "except runners.RuntimeMissing as exc:\n"
        "    print(exc)\n"
    )
    no_steps = (
        "import sys\n"
        "sys.modules['steps'] = None\n"
        f"sys.path.insert(0, {folder!r})\n"
        "import torch_runners\n"
        "print('loaded')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    outputs = []
    for code in (no_torch, no_steps):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout.strip().splitlines())
    assert outputs[0][0] == "loaded"
    assert outputs[0][1].startswith("torch is not installed: this champion runs a torch variant")
    assert outputs[1] == ["loaded"]
    assert {p.stem for p in CODE_PATHS} == {
        "runners",
        "torch_runners",
        "strict_input",
        "serving_manifest",
    }


def test_openvino_runner_answers_concurrent_callers(bundle: Bundle) -> None:
    """``mlflow models serve`` runs each request's ``predict`` in a thread of its own
    (``asyncio.to_thread``): the OpenVINO runner shares one infer request and one async
    queue, so concurrent calls must take turns, each with its own answer."""
    from concurrent.futures import ThreadPoolExecutor

    from steps.common.serving.runners import OpenVinoRunner

    folder = Path(bundle.optimized_uri.removeprefix("file://"))
    runner = OpenVinoRunner(folder / "openvino_int8.xml", 2, throughput_batch=8)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((size, 3, 32, 32)).astype(np.float32) for size in [1, 4, 16] * 8]
    alone = [runner(x) for x in inputs]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(runner, inputs))
    for got, want in zip(together, alone, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["onnx", "openvino", "onnx_int8", "openvino_int8"])
def test_pixel_runner_equals_normalising_first(bundle: Bundle, kind: str) -> None:
    """The served pyfunc hands its runners the uint8 pixels: OpenVINO's compiles the
    normalisation and the transpose into its graph, ONNX Runtime's does them in numpy. Either
    answers what the variant answers on ``normalise_uint8``'s floats, at a batch below and
    at or above OpenVINO's THROUGHPUT threshold (the batch split across streams)."""
    from steps.common.serving.runners import load_runner, normalise_uint8

    variant = bundle.optimize_result.manifest.document()["variants"][kind]
    if variant["status"] != "built":
        pytest.skip(f"{kind} was not built here: {variant.get('reason')}")
    cfg = PipelineConfig()
    split = load_test_split(bundle.dataset_uri, cfg.storage)
    trained = load_trained(bundle.model_uri, cfg.storage, torch.device("cpu"))
    mean, std = list(trained.mean), list(trained.std)
    path = bundle.root / "opt" / variant["file"]
    details = {**variant["details"], "throughput_batch": 8}
    on_floats = load_runner(variant["kind"], path, details, 2)
    on_pixels = load_runner(variant["kind"], path, details, 2, (mean, std))
    images = split.images[:24].permute(0, 2, 3, 1).contiguous().numpy()
    assert images.dtype == np.uint8
    for batch in (images[:3], images):
        want = on_floats(normalise_uint8(batch, mean, std))
        got = on_pixels(batch)
        assert got.shape == want.shape == (len(batch), len(trained.classes))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
