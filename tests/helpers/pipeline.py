"""A whole pipeline's arguments against the session's S3 and MLflow servers
(tests/conftest.py's ``pipeline``; a test with servers of its own calls ``pipeline_in``)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.local.servers.mlflow_server import MLflowServer
from tests.helpers.buckets import S3Bucket
from tests.helpers.paths import REPO_ROOT

SMOKE = REPO_ROOT / "configs" / "smoke.yaml"


def sets(overrides: list[str]) -> list[str]:
    """``--set`` before each override, as the command line takes them."""
    return [arg for item in overrides for arg in ("--set", item)]


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
