"""The test helper tests/helpers/argo_conditions.py against what Argo documents and tests of its
resource conditions (argo-workflows v4.0.5): ``workflow/executor/resource_test.go``
TestResourceConditionsMatching, and the conditions of ``examples/k8s-jobs.yaml``,
``examples/k8s-wait-wf.yaml`` and ``examples/k8s-resource-log-selector.yaml``; plus the
label-selector rules of kubernetes/apimachinery ``pkg/labels/selector.go`` that decide
what a condition may say."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.argo_conditions import Requirement, SelectorError, gjson_get, outcome, parse

PHASE = ("status.phase == Succeeded", "status.phase == Error")  # resource_test.go
K8S_JOBS = ("status.succeeded > 2", "status.failed > 1")  # examples/k8s-jobs.yaml
WAIT_WF = ("status.phase == Succeeded", "status.phase in (Failed, Error)")  # k8s-wait-wf
LOG_SELECTOR = (  # examples/k8s-resource-log-selector.yaml (a PyTorchJob's Workers)
    "status.replicaStatuses.Worker.succeeded = 2",
    "status.replicaStatuses.Worker.failed > 0",
)


@pytest.mark.parametrize(
    ("conditions", "document", "expected"),
    [
        pytest.param(PHASE, {"status": {"phase": "Error"}}, "failed", id="argo-test-error"),
        pytest.param(PHASE, {"status": {"phase": "Succeeded"}}, "succeeded", id="argo-test-ok"),
        pytest.param(PHASE, {"status": {"phase": "Pending"}}, "waiting", id="argo-test-pending"),
        pytest.param(K8S_JOBS, {"status": {"succeeded": 3}}, "succeeded", id="job-done"),
        pytest.param(K8S_JOBS, {"status": {"succeeded": 2}}, "waiting", id="job-not-yet"),
        pytest.param(K8S_JOBS, {"status": {"failed": 2}}, "failed", id="job-failed"),
        pytest.param(K8S_JOBS, {"status": {}}, "waiting", id="job-no-counts"),
        pytest.param(WAIT_WF, {"status": {"phase": "Error"}}, "failed", id="wf-in-set"),
        pytest.param(WAIT_WF, {"status": {"phase": "Running"}}, "waiting", id="wf-running"),
        pytest.param(
            LOG_SELECTOR,
            {"status": {"replicaStatuses": {"Worker": {"succeeded": 2}}}},
            "succeeded",
            id="workers-done",
        ),
        pytest.param(
            LOG_SELECTOR,
            {"status": {"replicaStatuses": {"Worker": {"active": 1, "failed": 1}}}},
            "failed",
            id="a-worker-failed",
        ),
        pytest.param(("", ""), {}, "succeeded", id="no-conditions-return-at-once"),
        pytest.param(("", "status.failed > 0"), {}, "succeeded", id="no-success-condition"),
    ],
)
def test_argo_documented_conditions(
    conditions: tuple[str, str], document: dict[str, Any], expected: str
) -> None:
    success, failure = conditions
    assert outcome(document, success, failure) == expected


@pytest.mark.parametrize(
    ("success", "failure", "document", "expected"),
    [
        # matchConditions: any failure requirement fails; every success one must hold
        pytest.param("a == 1", "b == 1, c == 1", {"c": 1}, "failed", id="failure-is-or"),
        pytest.param("a == 1, b == 1", "", {"a": 1}, "waiting", id="success-is-and"),
        pytest.param("a == 1, b == 1", "", {"a": 1, "b": 1}, "succeeded", id="success-all"),
        pytest.param("a == 1", "a == 1", {"a": 1}, "failed", id="failure-first"),
    ],
)
def test_failure_requirements_are_or_success_requirements_are_and(
    success: str, failure: str, document: dict[str, Any], expected: str
) -> None:
    assert outcome(document, success, failure) == expected


@pytest.mark.parametrize(
    ("selector", "document", "matches"),
    [
        pytest.param("a.b != x", {}, True, id="not-equal-missing-key"),
        pytest.param("a.b notin (x)", {}, True, id="notin-missing-key"),
        pytest.param("a.b == x", {}, False, id="equal-missing-key"),
        pytest.param("a.b > 0", {}, False, id="gt-missing-key"),
        pytest.param("a.b > 0", {"a": {"b": "many"}}, False, id="gt-not-an-integer"),
        pytest.param("a.b < 0", {"a": {"b": -1}}, True, id="lt"),
        pytest.param("a.b", {"a": {"b": None}}, True, id="exists-null"),
        pytest.param("!a.b", {"a": {}}, True, id="does-not-exist"),
        pytest.param("a.1.t == Failed", {"a": [{"t": "x"}, {"t": "Failed"}]}, True, id="index"),
        pytest.param("a.2.t == Failed", {"a": [{"t": "Failed"}]}, False, id="index-past-end"),
        pytest.param("a.b == true", {"a": {"b": True}}, True, id="bool-as-text"),
        pytest.param("a.b ==", {"a": {"b": ""}}, True, id="nothing-means-empty"),
    ],
)
def test_requirement_matches_as_apimachinery_over_gjson(
    selector: str, document: dict[str, Any], matches: bool
) -> None:
    (requirement,) = parse(selector)
    assert requirement.matches(document) is matches


@pytest.mark.parametrize(
    ("selector", "match"),
    [
        pytest.param('status.conditions.#(type=="Failed").status', r"not a qualified", id="query"),
        pytest.param("status.failed > some", r"must be an integer", id="gt-text"),
        pytest.param("status.phase == (x)", r"expected: identifier", id="paren-value"),
        pytest.param("status.@reverse.0 == x", r"not a qualified name", id="modifier"),
        pytest.param("a == b, ", r"expected: identifier after ','", id="trailing-comma"),
    ],
)
def test_conditions_labels_parse_refuses(selector: str, match: str) -> None:
    with pytest.raises(SelectorError, match=match):
        parse(selector)


def test_parse_sorts_by_key_and_reads_in_lists() -> None:
    assert parse("z == 1, a in (x, y)") == [
        Requirement("a", "in", ("x", "y")),
        Requirement("z", "==", ("1",)),
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [(3, "3"), ("Failed", "Failed"), (False, "false"), ([1, 2], "[1,2]"), ({"k": 1}, '{"k":1}')],
)
def test_gjson_string_of_each_json_type(value: Any, text: str) -> None:
    assert gjson_get({"v": value}, "v") == (True, text)
