"""``python -m steps.reuse``, the check of a memo hit, against a real SeaweedFS S3 and a
real ``mlflow server``: the object each step publishes last is still there, and a reused
benchmark decision is still the registry's (its alias where the decision left it, that
version not rolled back); else ``gone`` and one line. The whole check in runs of the
pipeline: tests/test_local_memo.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from flows.local.servers.mlflow_server import MLflowServer
from steps.common.config import load_config
from steps.common.storage import open_store
from steps.reuse import step as reuse
from steps.reuse.check import registry_moved
from tests.helpers.buckets import S3Bucket

PUBLISHED = {  # step -> (output, what it writes last)
    "stage": ("dataset-uri", "manifest.json"),
    "train": ("model-uri", "model.json"),
    "optimize": ("optimized", "variants.json"),
    "benchmark": ("report-uri", "benchmark.json"),
}


def check(step: str, reused: dict[str, str], tmp_path: Path, *sets: str) -> tuple[str, str]:
    """The check's exit, ``gone`` and its one line."""
    argv = ["--step", step, "--reused", json.dumps(reused), "--outputs-dir", str(tmp_path)]
    argv += [a for s in ["tracking.enabled=false", *sets] for a in ("--set", s)]
    assert reuse.main(argv) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    return (tmp_path / "gone").read_text(), summary["line"]


@pytest.mark.parametrize("step", list(PUBLISHED))
def test_a_hit_whose_published_object_is_gone_runs_again(
    step: str, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    output, marker = PUBLISHED[step]
    uri = f"{s3_bucket.uri}/runs/cifar-earlier/{step}"
    store = open_store(uri)
    store.write_bytes(marker, b"{}")
    reused = {output: uri, "workflow": "cifar-earlier"}
    endpoint = f"storage.endpoint_url={s3_bucket.server.endpoint}"
    assert check(step, reused, tmp_path, endpoint) == (
        "false",
        f"{step}: reused from cifar-earlier",
    )
    store.delete(marker)  # what a user's clean-up of the earlier run does
    gone, line = check(step, reused, tmp_path, endpoint)
    assert gone == "true"
    assert line == (
        f"{step}: the memo from cifar-earlier no longer holds ({uri}/{marker} no longer "
        "exists): runs again"
    )


@pytest.fixture
def registry(mlflow_server: MLflowServer, monkeypatch: pytest.MonkeyPatch):
    """A registered model of its own with versions 1 and 2, on the session's server."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    name = f"reuse-{uuid.uuid4().hex[:8]}"
    client.create_registered_model(name)
    experiment = client.get_experiment_by_name("Default").experiment_id
    for _ in range(2):
        run = client.create_run(experiment)
        source = f"{run.info.artifact_uri}/model"
        client.create_model_version(name, source=source, run_id=run.info.run_id)
    return client, name


@pytest.mark.parametrize(
    ("decision", "alias", "rolled_back", "moved"),
    [
        pytest.param(("true", "2", "1"), "2", False, None, id="promoted-still-champion"),
        pytest.param(
            ("true", "2", "1"),
            "1",
            False,
            "{}@champion is v1, its decision left v2",
            id="moved-back",
        ),
        pytest.param(
            ("true", "2", "1"),
            None,
            False,
            "{}@champion is none, its decision left v2",
            id="removed",
        ),
        pytest.param(
            ("true", "2", "1"), "2", True, "{} v2 was rolled back since", id="rolled-back"
        ),
        pytest.param(("false", "2", "1"), "1", False, None, id="kept-still-champion"),
        pytest.param(
            ("false", "2", "1"),
            "2",
            False,
            "{}@champion is v2, its decision left v1",
            id="kept-moved",
        ),
        pytest.param(("false", "", ""), None, False, None, id="untracked"),
    ],
)
def test_a_reused_decision_holds_while_the_registry_is_as_it_left_it(
    registry,
    decision: tuple[str, str, str],
    alias: str | None,
    rolled_back: bool,
    moved: str | None,
) -> None:
    client, name = registry
    if alias:
        client.set_registered_model_alias(name, "champion", alias)
    if rolled_back:
        client.set_model_version_tag(name, decision[1], "serving.rollback", "check failed")
    promoted, version, previous = decision
    reused = {"promoted": promoted, "model-version": version, "previous-version": previous}
    cfg = load_config(None, [f"benchmark.registered_model={name}", "tracking.uri=http://unused"])
    found = registry_moved(cfg, reused)
    assert found == (None if moved is None else moved.format(name))
