"""Where --submit sends and what it carries from the shell (flows/argo/connection.py): a
config unfit for a cluster refused before any request, the namespace from the config or
the environment, the environment filling what the config leaves open, the shell's
MLFLOW_TRACKING_URI reaching the rendered pods."""

from __future__ import annotations

import re

import pytest
import yaml

from flows import cifar
from flows.argo.connection import resolve_config
from flows.cli import main as cli
from steps.common.config import load_config
from tests.helpers.fake_argo import CLUSTER_READY, ENVIRONMENT, SMOKE, FakeArgo, submit
from tests.helpers.paths import REPO_ROOT

# Hera 7.1 serialises requests with pydantic's deprecated .json(); not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:The `json` method is deprecated")


@pytest.mark.parametrize(
    ("argv", "env", "match"),
    [
        pytest.param(
            ["--set", "storage.root_uri=file://./artifacts"],
            {},
            r"storage\.root_uri 'file://\./artifacts' is a directory of one machine",
            id="local-storage",
        ),
        pytest.param(
            ["--set", "tracking.uri=sqlite:///mlflow.db"],
            {},
            r"tracking\.uri 'sqlite:///mlflow\.db' is a file in each pod",
            id="sqlite",
        ),
        pytest.param(
            [],
            {"ARGO_HOST": ""},
            r"no Argo server: set cluster\.argo_host, ARGO_SERVER \(host:2746\) or ARGO_HOST",
            id="no-host",
        ),
        pytest.param(
            [],
            {"ARGO_HOST": "argo:2746"},
            r"cluster\.argo_host 'argo:2746': give a URL",
            id="no-scheme",
        ),
        pytest.param(
            [],
            {"ARGO_NAMESPACE": "Not_A_Name"},
            r"ARGO_\*\): cluster\.namespace: .*not a Kubernetes name",
            id="bad-namespace",
        ),
    ],
)
def test_config_unfit_for_a_cluster_is_refused_before_any_request(
    argo: FakeArgo, monkeypatch, capsys, argv, env, match
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert submit(*argv) == 2
    assert re.search(match, capsys.readouterr().err)
    assert argo.requests == []


@pytest.mark.parametrize(
    ("config", "env_namespace", "expected"),
    [
        pytest.param(SMOKE, "team-a", "team-a", id="env-fills-an-unset-namespace"),
        pytest.param(
            str(REPO_ROOT / "configs" / "cluster.yaml"),
            "team-a",
            "argo",
            id="config-that-names-it-wins",
        ),
        pytest.param(SMOKE, None, "argo", id="default"),
    ],
)
def test_namespace_from_config_or_environment(argo, monkeypatch, config, env_namespace, expected):
    if env_namespace:
        monkeypatch.setenv("ARGO_NAMESPACE", env_namespace)
    assert cli.main(["--config", config, *CLUSTER_READY, "--submit"], cifar) == 0
    assert argo.requests[0]["path"] == f"/api/v1/workflow-templates/{expected}/cifar-pipeline"
    assert argo.requests[1]["body"]["template"]["metadata"]["namespace"] == expected
    assert argo.requests[-1]["path"] == f"/api/v1/workflows/{expected}"
    assert argo.requests[-1]["body"]["workflow"]["metadata"]["namespace"] == expected


@pytest.mark.parametrize(
    ("env", "overrides", "argo_host", "tracking_uri"),
    [
        pytest.param(
            {"ARGO_SERVER": "localhost:2746"}, [], "https://localhost:2746", None, id="argo-server"
        ),
        pytest.param(
            {"ARGO_SERVER": "argo.example:443", "ARGO_SECURE": "false"},
            [],
            "http://argo.example:443",
            None,
            id="argo-secure-false",
        ),
        pytest.param(
            {"ARGO_SERVER": "argo.example", "ARGO_BASE_HREF": "/argo/"},
            [],
            "https://argo.example/argo",
            None,
            id="argo-base-href",
        ),
        pytest.param(
            {"ARGO_HOST": "https://old.example:2746"},
            [],
            "https://old.example:2746",
            None,
            id="argo-host-alias",
        ),
        pytest.param(
            {"ARGO_HOST": "https://old.example", "ARGO_SERVER": "new.example:2746"},
            [],
            "https://new.example:2746",
            None,
            id="argo-server-wins-over-the-alias",
        ),
        pytest.param(
            {"ARGO_SERVER": "env.example:2746"},
            ["cluster.argo_host=https://config.example"],
            "https://config.example",
            None,
            id="config-wins-over-argo-server",
        ),
        pytest.param(
            {"MLFLOW_TRACKING_URI": "http://mlflow.example:5000"},
            [],
            None,
            "http://mlflow.example:5000",
            id="mlflow-uri-fills-the-default-store",
        ),
        pytest.param(
            {"MLFLOW_TRACKING_URI": "http://mlflow.example:5000"},
            ["tracking.uri=http://mlflow.mlflow.svc:5000"],
            None,
            "http://mlflow.mlflow.svc:5000",
            id="config-that-names-a-server-wins",
        ),
    ],
)
def test_environment_fills_what_the_config_leaves_open(
    monkeypatch, env, overrides, argo_host, tracking_uri
) -> None:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    cfg = load_config(REPO_ROOT / "configs" / "smoke.yaml", overrides)
    resolved = resolve_config(cfg, env)
    assert resolved.cluster.argo_host == argo_host
    assert resolved.tracking.uri == (tracking_uri or cfg.tracking.uri)


def test_mlflow_tracking_uri_of_the_shell_reaches_the_rendered_pods(monkeypatch, capsys) -> None:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert cli.main(["--config", SMOKE, "--render"], cifar) == 0
    template, workflow = yaml.safe_load_all(capsys.readouterr().out)
    assert workflow["spec"]["workflowTemplateRef"] == {"name": "cifar-pipeline"}
    rendered = template
    values = {
        env["value"]
        for template in rendered["spec"]["templates"]
        for env in template.get("container", {}).get("env", [])
        if env["name"] == "MLFLOW_TRACKING_URI"
    }
    assert values == {"http://mlflow.example:5000"}
