"""What the local runner takes of an InferenceService resource template: anything but an
apply of one, or a delete of the run's by name, is refused before the run starts; the
predictor's --host and --port arguments are rewritten to 127.0.0.1 and its free port."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flows.local.checks.fields import unsupported
from flows.local.errors import UnsupportedFeature
from flows.local.pods.services import rewrite_args
from flows.local.workflow import LocalRunner
from tests.helpers.local_isvc import (
    API,
    RESOURCE,
    task,
    workflow,
)

SERVICE = f"apiVersion: {API}\nkind: InferenceService\n"
MEMO = {"key": "k", "cache": {"configMap": {"name": "c"}}}


@pytest.mark.parametrize(
    ("resource", "extra", "match"),
    [
        pytest.param(
            {"action": "create", "manifest": SERVICE},
            {},
            r"other than a PyTorchJob or TrainJob \(or an InferenceService with action apply\)",
            id="create",
        ),
        pytest.param(
            {"action": "apply", "manifest": "apiVersion: v1\nkind: ConfigMap\n"},
            {},
            r"resource: action 'apply'",
            id="apply-other-kind",
        ),
        pytest.param(
            {"action": "apply", "flags": ["--x"], "manifest": SERVICE},
            {},
            r"d.resource: flags",
            id="apply-flags",
        ),
        pytest.param(
            {"action": "apply", "manifest": SERVICE},
            {"memoize": MEMO},
            r"memoize on an InferenceService apply",
            id="memoized",
        ),
        pytest.param(
            {"action": "delete", "flags": [RESOURCE, "a", "b"]},
            {},
            r"a delete other than of the run's",
            id="delete-two-names",
        ),
        pytest.param(
            {"action": "delete", "flags": [RESOURCE, "--all"]},
            {},
            r"a delete other than of the run's",
            id="delete-all",
        ),
    ],
)
def test_what_is_not_an_inferenceservice_apply_or_delete_by_name_is_refused(
    tmp_path: Path, resource: dict[str, Any], extra: dict[str, Any], match: str
) -> None:
    manifest = workflow([{"name": "d", "resource": resource, **extra}], [task("d", "d")])
    assert any(re.search(match, p) for p in unsupported(manifest)), unsupported(manifest)
    with pytest.raises(UnsupportedFeature, match=match):
        LocalRunner(manifest, tmp_path / "runs")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--host", "0.0.0.0", "--port", "8080"], ["--host", "127.0.0.1", "--port", "9"]),
        (["--host=0.0.0.0", "--port=80", "--x", "1"], ["--host=127.0.0.1", "--port=9", "--x", "1"]),
        (
            ["--model-uri", "m", "--set", "serving.port=1"],
            ["--model-uri", "m", "--set", "serving.port=1"],
        ),
    ],
    ids=["separate", "joined", "absent"],
)
def test_port_and_host_args_are_rewritten(argv: list[str], expected: list[str]) -> None:
    assert rewrite_args(argv, 9) == expected
