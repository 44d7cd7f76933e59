"""Submission through Hera's WorkflowsService to a small Argo Server on 127.0.0.1.

``FakeArgo`` (tests/helpers/fake_argo.py) speaks the routes ``flows.argo.submit`` calls,
with the paths and bodies of Argo's ``pkg/apiclient`` protos: create/get Workflow (``POST
/api/v1/workflows/{ns}`` with ``{"workflow"}``), get/create/update CronWorkflow and
WorkflowTemplate (``POST /api/v1/workflow-templates/{ns}`` with ``{"template"}``, ``PUT
.../{name}`` with the stored ``resourceVersion``, else 409). A Workflow with a
``workflowTemplateRef`` is refused, as the server does, when the template is missing or a
parameter is not one it declares. Earlier runs it holds (``workflows``) answer a get by
name, as a failed run does for ``--resubmit``; another name is a 404. It answers with Argo's
JSON error bodies, checks the bearer token, and records every request. No real cluster is
used.
"""

from __future__ import annotations

import json
import re
import socket

import pytest

from tests.helpers.fake_argo import TOKEN, FakeArgo, submit
from tests.helpers.flow_helpers import SECRETS

# Hera 7.1 serialises requests with pydantic's deprecated .json(); not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:The `json` method is deprecated")


def test_submit_sends_the_workflow_and_prints_the_links(
    argo: FakeArgo, monkeypatch, capsys
) -> None:
    for name, value in SECRETS.items():
        if name != "ARGO_TOKEN":
            monkeypatch.setenv(name, value)
    assert submit() == 0
    assert [(r["method"], r["path"]) for r in argo.requests] == [
        ("GET", "/api/v1/workflow-templates/argo/cifar-pipeline"),
        ("POST", "/api/v1/workflow-templates/argo"),
        ("POST", "/api/v1/workflows/argo"),
    ]
    assert {r["auth"] for r in argo.requests} == {f"Bearer {TOKEN}"}
    template = argo.requests[1]["body"]["template"]
    assert (template["kind"], template["metadata"]["name"]) == (
        "WorkflowTemplate",
        "cifar-pipeline",
    )
    assert template["spec"]["entrypoint"] == "pipeline"
    assert template["spec"]["onExit"] == "exit-handler"
    wf = argo.requests[2]["body"]["workflow"]
    assert (wf["kind"], wf["metadata"]["generateName"], wf["metadata"]["namespace"]) == (
        "Workflow",
        "cifar-",
        "argo",
    )
    assert wf["spec"] == {"workflowTemplateRef": {"name": "cifar-pipeline"}}
    for request in argo.requests:
        payload = json.dumps(request["body"])
        assert TOKEN not in payload and not [v for v in SECRETS.values() if v in payload]
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "WorkflowTemplate cifar-pipeline created in namespace argo",
        "Workflow cifar-x7k2p submitted to namespace argo",
        f"Argo UI: {argo.host}/workflows/argo/cifar-x7k2p",
        "MLflow: http://mlflow.mlflow:5000 (experiment cifar-pipeline, run cifar-x7k2p)",
    ]


@pytest.mark.parametrize(
    ("phases", "message", "code", "last"),
    [
        pytest.param(
            ["Pending", "Running", "Succeeded"], "", 0, "cifar-x7k2p: Succeeded 5/5", id="succeeded"
        ),
        pytest.param(
            ["Running", "Failed"],
            "child 'train' failed",
            1,
            "cifar-x7k2p: child 'train' failed",
            id="failed",
        ),
        pytest.param(["Error"], "pod deleted", 1, "cifar-x7k2p: pod deleted", id="error"),
    ],
)
def test_wait_follows_the_phase_to_the_end(argo: FakeArgo, capsys, phases, message, code, last):
    argo.phases, argo.message = list(phases), message
    assert submit("--wait") == code
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == last
    assert "MLflow run: http://mlflow/#/experiments/1/runs/abc" in out
    gets = [r for r in argo.requests if r["method"] == "GET" and "/workflows/" in r["path"]]
    assert {r["path"] for r in gets} == {"/api/v1/workflows/argo/cifar-x7k2p"}
    assert len(gets) == len(phases)


@pytest.mark.parametrize(
    ("argv", "env", "reject", "match"),
    [
        pytest.param(
            [],
            {"ARGO_TOKEN": "wrong"},
            None,
            r"^argo: 401 Unauthorized at http://127\.0\.0\.1:\d+: the token was refused",
            id="401-bad-token",
        ),
        pytest.param(
            [],
            {"ARGO_TOKEN": ""},
            None,
            r"^argo: 401 Unauthorized .*no token was given",
            id="401-no-token",
        ),
        pytest.param(
            ["--set", "cluster.namespace=forbidden"],
            {},
            None,
            r"^argo: 403 Forbidden: this token may not create WorkflowTemplate in namespace "
            r"forbidden: .*cannot create resource",
            id="403",
        ),
        pytest.param(
            ["--set", "cluster.namespace=missing"],
            {},
            None,
            r'^argo: 404 Not Found: namespace missing .*namespaces "missing" not found; '
            r"set cluster.namespace or ARGO_NAMESPACE",
            id="404-namespace",
        ),
        pytest.param(
            [],
            {},
            (400, "templates.train: failed to resolve {{inputs.parameters.x}}"),
            r"^argo: 400 Bad Request: the server rejected the workflow: templates\.train",
            id="400-validation",
        ),
        pytest.param(
            [],
            {},
            (409, 'workflows.argoproj.io "cifar-x7k2p" already exists'),
            r"^argo: 409 Conflict: the workflow already exists in argo",
            id="409",
        ),
        pytest.param(
            [],
            {},
            (500, "etcdserver: request timed out"),
            r"^argo: 500 from http://127.*: etcdserver: request timed out",
            id="500",
        ),
    ],
)
def test_server_errors_become_one_line(
    argo: FakeArgo, monkeypatch, capsys, argv, env, reject, match
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argo.reject = reject
    assert submit(*argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(match, err), err


def test_unreachable_server_is_one_line(monkeypatch, capsys) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("ARGO_HOST", f"http://127.0.0.1:{port}")
    assert submit() == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"argo: cannot reach http://127\.0\.0\.1:\d+ \(ConnectionError\); .*\n", err
    )


def test_cron_submit_creates_then_updates_with_the_resource_version(argo: FakeArgo, capsys) -> None:
    assert submit("--cron") == 0
    assert [(r["method"], r["path"]) for r in argo.requests] == [
        ("GET", "/api/v1/workflow-templates/argo/cifar-pipeline"),
        ("POST", "/api/v1/workflow-templates/argo"),
        ("GET", "/api/v1/cron-workflows/argo/cifar-nightly"),
        ("POST", "/api/v1/cron-workflows/argo"),
    ]
    created = argo.requests[-1]["body"]["cronWorkflow"]
    assert (
        created["spec"]["schedules"] == ["0 2 * * *"]
        and "resourceVersion" not in created["metadata"]
    )
    assert "CronWorkflow cifar-nightly created in namespace argo" in capsys.readouterr().out
    argo.requests.clear()
    assert submit("--cron", "--set", "schedule.cron=30 3 * * 1") == 0
    assert [(r["method"], r["path"]) for r in argo.requests] == [
        ("GET", "/api/v1/workflow-templates/argo/cifar-pipeline"),
        ("PUT", "/api/v1/workflow-templates/argo/cifar-pipeline"),
        ("GET", "/api/v1/cron-workflows/argo/cifar-nightly"),
        ("PUT", "/api/v1/cron-workflows/argo/cifar-nightly"),
    ]
    updated = argo.requests[-1]["body"]["cronWorkflow"]
    assert updated["metadata"]["resourceVersion"] == "1"
    assert updated["spec"]["schedules"] == ["30 3 * * 1"]
    assert updated["spec"]["workflowSpec"]["workflowTemplateRef"] == {"name": "cifar-pipeline"}
    assert argo.crons["cifar-nightly"]["metadata"]["resourceVersion"] == "2"
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "WorkflowTemplate cifar-pipeline updated in namespace argo",
        "CronWorkflow cifar-nightly updated in namespace argo: '30 3 * * 1' (UTC)",
        f"Argo UI: {argo.host}/cron-workflows/argo/cifar-nightly",
    ]


@pytest.mark.parametrize("kind", ["workflow-templates", "cron-workflows"])
def test_an_update_that_loses_a_race_is_read_again_and_retried_once(
    argo: FakeArgo, kind: str
) -> None:
    assert submit("--cron") == 0
    argo.requests.clear()
    argo.races[kind] = 1  # someone else updates it between our GET and our PUT
    assert submit("--cron", "--set", "schedule.cron=30 3 * * 1") == 0
    mine = [r for r in argo.requests if r["path"].split("/")[3] == kind]
    assert [r["method"] for r in mine] == ["GET", "PUT", "GET", "PUT"]
    sent = [next(iter(r["body"].values()))["metadata"]["resourceVersion"] for r in mine[1::2]]
    assert sent == ["1", "2"]  # the stale one, then the one read again
    name = "cifar-pipeline" if kind == "workflow-templates" else "cifar-nightly"
    assert argo.stored[kind][name]["metadata"]["resourceVersion"] == "3"
    if kind == "cron-workflows":
        assert argo.crons[name]["spec"]["schedules"] == ["30 3 * * 1"]


def test_a_create_that_loses_a_race_becomes_an_update(argo: FakeArgo, capsys) -> None:
    argo.races["workflow-templates"] = (
        1  # someone else creates the template between our GET and our POST
    )
    assert submit() == 0
    assert [(r["method"], r["path"]) for r in argo.requests][:4] == [
        ("GET", "/api/v1/workflow-templates/argo/cifar-pipeline"),
        ("POST", "/api/v1/workflow-templates/argo"),
        ("GET", "/api/v1/workflow-templates/argo/cifar-pipeline"),
        ("PUT", "/api/v1/workflow-templates/argo/cifar-pipeline"),
    ]
    assert "WorkflowTemplate cifar-pipeline updated in namespace argo" in capsys.readouterr().out


def test_losing_the_race_twice_is_one_line(argo: FakeArgo, capsys) -> None:
    argo.races["workflow-templates"] = 2
    assert submit() == 1
    assert re.fullmatch(
        r"argo: 409 Conflict: the WorkflowTemplate already exists in argo: .*\n",
        capsys.readouterr().err,
    )
    assert not [r for r in argo.requests if r["path"] == "/api/v1/workflows/argo"]


def test_parameters_given_with_p_reach_the_workflow_not_the_template(argo: FakeArgo) -> None:
    assert (
        submit("-p", "epochs=3", "-p", "nodes=2", "--parameter", "data-source=synthetic:500") == 0
    )
    template = argo.templates["cifar-pipeline"]
    defaults = {p["name"]: p["value"] for p in template["spec"]["arguments"]["parameters"]}
    assert (defaults["epochs"], defaults["nodes"], defaults["data-source"]) == (
        "4",
        "1",
        "synthetic:2000",
    )
    wf = argo.requests[-1]["body"]["workflow"]
    assert wf["spec"]["arguments"]["parameters"] == [
        {"name": "epochs", "value": "3"},
        {"name": "nodes", "value": "2"},
        {"name": "data-source", "value": "synthetic:500"},
    ]


def test_the_server_refuses_a_parameter_the_template_does_not_declare(argo: FakeArgo) -> None:
    """The stand-in checks what Argo checks; our CLI never sends such a run."""
    assert submit() == 0
    code, body = argo.check_reference(
        {
            "spec": {
                "workflowTemplateRef": {"name": "cifar-pipeline"},
                "arguments": {"parameters": [{"name": "epochz", "value": "1"}]},
            }
        }
    ) or (200, {})
    assert code == 400 and "epochz" in body["message"]
    assert argo.check_reference({"spec": {"workflowTemplateRef": {"name": "other"}}})[0] == 400
