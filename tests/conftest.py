"""Shared fixtures: a real SeaweedFS S3 server and a real ``mlflow server`` on 127.0.0.1, and
what several test modules read: a trained and optimized model, the champion it makes and
its server, a whole pipeline's arguments."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.local.servers.mlflow_server import MLflowServer
from flows.local.servers.seaweedfs import SeaweedFS
from tests.helpers.buckets import S3Bucket
from tests.helpers.fake_argo import ENVIRONMENT, TOKEN, FakeArgo
from tests.helpers.groups import pytest_collection_modifyitems  # noqa: F401 (the hook)
from tests.helpers.pipeline import Pipeline, pipeline_in


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs")).start()
    yield server
    server.stop()


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
    (tests/helpers/model_bundle.py)."""
    from tests.helpers.model_bundle import build_bundle

    return build_bundle(tmp_path_factory.mktemp("bundle"))


@pytest.fixture(scope="session")
def champion(bundle, tmp_path_factory: pytest.TempPathFactory, mlflow_server) -> dict:
    """The real benchmark step run on ``bundle`` against the session's MLflow server: its
    serving pyfunc registered as tests/helpers/serving_helpers.py's NAME, alias champion."""
    from steps.benchmark import step as benchmark
    from tests.helpers.model_bundle import champion_args
    from tests.helpers.serving_helpers import NAME

    root = tmp_path_factory.mktemp("serving")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
        result = benchmark.run(champion_args(bundle, root / "report", NAME))
    return {"root": root, "result": result, "uri": mlflow_server.uri}


@pytest.fixture(scope="session")
def served(champion: dict) -> Iterator[str]:
    """The real ``mlflow models serve`` of the champion on 127.0.0.1: its URL."""
    from flows.local.servers.mlflow_server import mlflow_models_serve
    from tests.helpers.serving_helpers import CHAMPION

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


@pytest.fixture
def pipeline(s3_bucket: S3Bucket, mlflow_server: MLflowServer, tmp_path: Path) -> Pipeline:
    return pipeline_in(s3_bucket, mlflow_server, tmp_path)


@pytest.fixture(scope="session")
def smoke_run(
    seaweedfs: SeaweedFS, mlflow_server: MLflowServer, tmp_path_factory: pytest.TempPathFactory
):
    """The smoke pipeline, failed and resumed (tests/helpers/pipeline_runs.py), read by
    tests/test_local_pipeline.py and tests/test_review_smoke.py: (SmokeRun, MLflow client)."""
    from tests.helpers.pipeline_runs import smoke_run_in

    return smoke_run_in(seaweedfs, mlflow_server, tmp_path_factory.mktemp("smoke-run"))


@pytest.fixture(scope="session")
def example_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Runs of Argo's own examples in one runs directory, each page written by the runner
    as it ran (tests/helpers/review_helpers.py); the review tests only read them."""
    from tests.helpers.review_helpers import run_examples

    return run_examples(tmp_path_factory.mktemp("example-runs"))


@pytest.fixture
def argo(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeArgo]:
    """A small Argo Server on 127.0.0.1 (tests/helpers/fake_argo.py), the flow pointed at
    it through ARGO_HOST and ARGO_TOKEN, the rest of the shell's Argo settings cleared."""
    fake = FakeArgo()
    fake.thread.start()
    for name in (*ENVIRONMENT, "GIT_COMMIT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ARGO_HOST", fake.host)
    monkeypatch.setenv("ARGO_TOKEN", TOKEN)
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture(scope="session")
def builds() -> dict[str, tuple[dict[str, Any], ...]]:
    """What each ``apply -k`` of configs/cluster applies, from a copy of configs/cluster
    whose vendor/ the script filled from ../shared/vendor/cluster (CI) or from
    configs/cluster/vendor (a developer's), checked against vendor.lock on the way: built
    once, read by tests/test_cluster_install.py and test_cluster_install_sequence.py."""
    from tests.helpers import cluster_build

    found = cluster_build.vendored_builds()
    if found is None:
        pytest.skip(
            f"no vendored manifests in {cluster_build.SHARED_VENDOR} or "
            f"{cluster_build.VENDOR}: {cluster_build.POPULATE}"
        )
    return found


@pytest.fixture(scope="module")
def one_torch_thread():
    """In-process runs use one thread, as torchrun's ranks do: on a shared 2-core machine
    two OpenMP threads that must wait for each other run many times slower (the training
    tests' modules use it)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def dataset_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The small learnable synthetic dataset the training tests read, staged once
    (tests/test_train.py, test_train_ddp.py; one xdist group)."""
    import io

    from rich.console import Console

    from steps.common.config import load_config
    from steps.stage_data.stage import parse_source, stage_dataset
    from tests.helpers.train_runs import TRAIN_IMAGES

    root = tmp_path_factory.mktemp("artifacts")
    quiet = Console(file=io.StringIO())
    source = parse_source(f"synthetic:{TRAIN_IMAGES}")
    return stage_dataset(source, str(root), load_config(), quiet).dataset_uri
