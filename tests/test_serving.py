"""The champion serves: the benchmark registers a pyfunc holding the fastest portable
variants and the dispatcher, ``mlflow models serve -m models:/...@champion`` (the real CLI,
against the tests' real MLflow server) answers a batch of uint8 images with classes, names
and probabilities, and a request of the wrong shape or dtype gets a 4xx naming the
expected shape, not a stack trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch

from steps.benchmark import step as benchmark
from steps.common.config import PipelineConfig
from steps.common.inference import load_test_split, load_trained, normalize
from tests.servers import free_port
from tests.test_benchmark import bench_args
from tests.test_optimize_support import Bundle, bundle  # noqa: F401

NAME = "cifar10-classifier"


@pytest.fixture(scope="module")
def champion(bundle: Bundle, tmp_path_factory, mlflow_server) -> dict:  # noqa: F811
    root = tmp_path_factory.mktemp("serving")
    env = {"MLFLOW_TRACKING_URI": mlflow_server.uri}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        args = bench_args(
            bundle.model_uri,
            bundle.optimized_uri,
            bundle.dataset_uri,
            root / "report",
            f"benchmark.registered_model={NAME}",
            "benchmark.rounds=1",
        )
        result = benchmark.run(args)
    finally:
        for key, value in old.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    return {"root": root, "result": result, "uri": mlflow_server.uri}


@pytest.fixture(scope="module")
def served(champion: dict) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": champion["uri"]}
    env.pop("PYTHONPATH", None)  # the served model must not need this repository
    # mlflow execs uvicorn by name: the venv's bin must be on PATH, as when it is activated.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = [sys.executable, "-m", "mlflow", "models", "serve"]
    command += ["-m", f"models:/{NAME}@champion", "--env-manager", "local"]
    command += ["-h", "127.0.0.1", "-p", str(port), "-w", "1"]
    log = (champion["root"] / "serve.log").open("w")
    process = subprocess.Popen(command, env=env, cwd=champion["root"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/ping", timeout=2)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((champion["root"] / "serve.log").read_text()) from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


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


def test_served_batch_matches_eager(served: str, bundle: Bundle) -> None:  # noqa: F811
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
    ],
    ids=["nchw", "no-channels", "over-255", "negative"],
)
def test_wrong_shape_or_dtype_is_a_4xx_naming_what_is_expected(
    served: str, inputs: list, named: str
) -> None:
    # MLflow's scoring server casts JSON numbers to the signature's dtype before the model
    # sees them (numpy.array(data, dtype=uint8)): 0.5 arrives as 0, so only values no
    # uint8 holds can be refused as a wrong dtype.
    status, body = _post(served, {"inputs": inputs})
    assert 400 <= status < 500, body
    assert named in body["message"], body["message"][-300:]
    assert "Traceback" not in json.dumps(body)
