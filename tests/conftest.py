"""Shared fixtures: a real SeaweedFS S3 server and a real ``mlflow server`` on 127.0.0.1, and
what several test modules read: a trained and optimized model, the champion it makes and
its server, a whole pipeline's arguments."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.mlflow_server import MLflowServer
from tests.servers import SeaweedFS

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"

# Fixtures that take more than a few seconds to set up (a model trained and optimized, a
# whole pipeline run, torchrun, a cluster build): every test that uses one is ``slow``, so
# ``pytest -m "not slow"`` (the everyday subset, README "Set up") leaves it out. Tests
# slow on their own carry the mark themselves.
SLOW_FIXTURES = {
    "bundle",  # tests/model_bundle.py: a tiny model trained, then every variant built
    "champion",
    "served",
    "ddp_run",  # tests/test_train.py: torchrun with 2 ranks and MLflow
    "dry_run",  # tests/test_gpu_benchmark.py: benchmarks/gpu.py --quick
    "smoke_run",  # below (tests/pipeline_runs.py): the smoke pipeline, failed and resumed
    "transaction",  # tests/test_local_rollback.py: a first deployment
    "memo_runs",  # tests/test_local_memo.py: runs after a change, over one memo cache
    "builds",  # tests/test_cluster_install.py: kustomize builds of every layer
}


# pytest-xdist (pyproject's addopts: two workers, ``--dist loadgroup``) builds a session
# fixture once per worker and a module's fixture once per worker that runs one of its
# tests: the tests that read one of these expensive fixtures are one group, run by one
# worker, which builds it once. A test that reads several is in the first one's group.
GROUPED_BY = (
    "bundle",
    "smoke_run",
    "transaction",
    "memo_runs",
    "dry_run",
    "builds",
    "dataset_uri",
)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if SLOW_FIXTURES & used:
            item.add_marker(pytest.mark.slow)
        group = next((name for name in GROUPED_BY if name in used), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs")).start()
    yield server
    server.stop()


@dataclass
class S3Bucket:
    server: SeaweedFS
    name: str

    @property
    def uri(self) -> str:
        return f"s3://{self.name}"


@pytest.fixture
def s3_bucket(seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A fresh bucket, with the endpoint and credentials in the environment (as in a pod)."""
    for key, value in seaweedfs.env().items():
        monkeypatch.setenv(key, value)
    name = f"test-{uuid.uuid4().hex[:12]}"
    seaweedfs.client().create_bucket(Bucket=name)
    return S3Bucket(seaweedfs, name)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MLflowServer]:
    """A real ``mlflow server`` (SQLite, local artifacts) on 127.0.0.1 for the session."""
    server = MLflowServer(tmp_path_factory.mktemp("mlflow")).start()
    yield server
    server.stop()


# --- a trained model, its optimized variants and the champion they make ------------------
# Session-scoped: each is built once and only read by the tests of several modules (the
# optimize, benchmark, predict and serving tests). A test that changes the registry
# (moves an alias) makes a registered model of its own (tests/test_serve_check.py).


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory):
    """A staged synthetic dataset, a tiny trained ResNet-9 and its optimized variants
    (tests/model_bundle.py)."""
    from tests.model_bundle import build_bundle

    return build_bundle(tmp_path_factory.mktemp("bundle"))


@pytest.fixture(scope="session")
def champion(bundle, tmp_path_factory: pytest.TempPathFactory, mlflow_server) -> dict:
    """The real benchmark step run on ``bundle`` against the session's MLflow server: its
    serving pyfunc registered as tests/serving_helpers.py's NAME, alias champion."""
    from steps.benchmark import step as benchmark
    from tests.model_bundle import champion_args
    from tests.serving_helpers import NAME

    root = tmp_path_factory.mktemp("serving")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
        result = benchmark.run(champion_args(bundle, root / "report", NAME))
    return {"root": root, "result": result, "uri": mlflow_server.uri}


@pytest.fixture(scope="session")
def served(champion: dict) -> Iterator[str]:
    """The real ``mlflow models serve`` of the champion on 127.0.0.1: its URL."""
    from tests.mlflow_server import mlflow_models_serve
    from tests.serving_helpers import CHAMPION

    with mlflow_models_serve(CHAMPION, champion["uri"], champion["root"]) as url:
        yield url


@pytest.fixture(scope="session")
def images(bundle):
    """64 of the bundle's test images as a request sends them: uint8, N x 32 x 32 x 3."""
    from steps.common.config import PipelineConfig
    from steps.common.trained_model import load_test_split

    split = load_test_split(bundle.dataset_uri, PipelineConfig().storage)
    return split.images[:64].permute(0, 2, 3, 1).numpy()


# --- a whole pipeline against the session's S3 and MLflow servers ------------------------


@dataclass
class Pipeline:
    """``python flows/cifar.py`` with the smoke config against the session's SeaweedFS and
    ``mlflow server``: its arguments (a registered model of its own, so no other test's
    champion is compared with it), environment, working directory and an MLflow client."""

    args: list[str]
    env: dict[str, str]
    cwd: Path
    mlflow: Any
    model: str

    @property
    def s3_root(self) -> str:
        return next(a.split("=", 1)[1] for a in self.args if a.startswith("storage.root_uri="))


def pipeline_in(bucket: S3Bucket, mlflow_server: MLflowServer, root: Path) -> Pipeline:
    from mlflow.tracking import MlflowClient

    from tests.pipeline_runs import SMOKE, sets

    env = {**os.environ, **bucket.server.env(), "CIFAR_CACHE_DIR": str(root / "cache")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.pop("MLFLOW_TRACKING_URI", None)
    model = f"pipeline-{uuid.uuid4().hex[:8]}"
    overrides = [
        f"storage.root_uri={bucket.uri}/pipeline",
        f"storage.endpoint_url={bucket.server.endpoint}",
        f"tracking.uri={mlflow_server.uri}",
        f"benchmark.registered_model={model}",
    ]
    cwd = root / "work"
    cwd.mkdir()
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    return Pipeline(["--config", str(SMOKE), *sets(overrides)], env, cwd, client, model)


@pytest.fixture
def pipeline(s3_bucket: S3Bucket, mlflow_server: MLflowServer, tmp_path: Path) -> Pipeline:
    return pipeline_in(s3_bucket, mlflow_server, tmp_path)


@pytest.fixture(scope="session")
def smoke_run(
    seaweedfs: SeaweedFS, mlflow_server: MLflowServer, tmp_path_factory: pytest.TempPathFactory
):
    """The smoke pipeline, failed and resumed (tests/pipeline_runs.py), read by
    tests/test_local_pipeline.py and tests/test_review_smoke.py: (SmokeRun, MLflow client)."""
    from tests.pipeline_runs import smoke_run_in

    return smoke_run_in(seaweedfs, mlflow_server, tmp_path_factory.mktemp("smoke-run"))


@pytest.fixture(scope="session")
def example_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Runs of Argo's own examples in one runs directory, each page written by the runner
    as it ran (tests/review_helpers.py); the review tests only read them."""
    from tests.review_helpers import run_examples

    return run_examples(tmp_path_factory.mktemp("example-runs"))
