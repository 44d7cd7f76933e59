"""``--resubmit WORKFLOW``: a failed run submitted again to the small Argo Server on
127.0.0.1 (tests/helpers/fake_argo.py, conftest's ``argo``), the current template applied
and what the fix did not touch reused: the failed run's memo entries simulated as Argo's
controller keeps them (tests/helpers/memo_sim.py), its parameters carried over, the plan
printed per step (``--dry-run``)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from flows import cifar
from flows.cli import main as cli
from steps.common.config import load_config
from tests.helpers.fake_argo import CLUSTER_READY, SMOKE, FakeArgo
from tests.helpers.memo_sim import simulate

# Hera 7.1 serialises requests with pydantic's deprecated .json(); not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:The `json` method is deprecated")


# --- --resubmit: a failed run again, reusing what the fix did not touch -----------------

MEMOIZED = ("stage", "train", "optimize", "benchmark")


def resubmit(*argv: str) -> int:
    return cli.main(["--config", SMOKE, *CLUSTER_READY, *argv], cifar)


def failed_run(overrides: list[str], values: dict[str, str], failed: str) -> dict[str, Any]:
    """A run of the smoke config (made fit for a cluster) that failed at task ``failed``, as
    the Argo server returns it: its ``-p`` values as ``spec.arguments``, and a node per
    memoized step before it with the key Argo evaluated and saved and the outputs it handed
    on (tests/helpers/memo_sim.py), the failed node without outputs."""
    cfg = load_config(SMOKE, [*CLUSTER_READY[1::2], *overrides])
    run = simulate(cfg, values, "cifar-f41l5", {})
    nodes: dict[str, Any] = {}
    for step in MEMOIZED:
        phase = "Failed" if step == failed else "Succeeded"
        nodes[f"cifar-f41l5-{len(nodes)}"] = {
            "id": f"cifar-f41l5-{len(nodes)}",
            "name": f"cifar-f41l5.{run.tasks[step]}",
            "displayName": run.tasks[step],
            "type": "Retry",
            "phase": phase,
            "templateName": run.tasks[step],
            "memoizationStatus": {
                "hit": False,
                "key": run.keys[step],
                "cacheName": cfg.cluster.cache_configmap,
            },
            **(
                {}
                if phase == "Failed"
                else {
                    "outputs": {
                        "parameters": [
                            {"name": k, "value": v} for k, v in run.outputs[step].items()
                        ]
                    }
                }
            ),
        }
        if step == failed:
            break
    arguments = [{"name": k, "value": v} for k, v in values.items()]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "cifar-f41l5", "namespace": "argo", "uid": "u-0"},
        "spec": {
            "workflowTemplateRef": {"name": "cifar-pipeline"},
            **({"arguments": {"parameters": arguments}} if arguments else {}),
        },
        "status": {"phase": "Failed", "message": f"child '{failed}' failed", "nodes": nodes},
    }


def plan_lines(out: str) -> dict[str, str]:
    """The plan's line of each memoized step: ``reused ...`` or ``to run ...``."""
    lines = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=1)
        if len(parts) == 2 and parts[0] in MEMOIZED:
            lines[parts[0]] = parts[1]
    return lines


def test_resubmit_reuses_what_the_fix_did_not_touch_and_carries_the_parameters(
    argo: FakeArgo, capsys
) -> None:
    """The failed run deployed nothing (its deploy failed); the fix is an optimize setting:
    stage and train keep their keys (reused from the failed run), optimize's config part
    changed, and benchmark reads what optimize makes anew. The new Workflow runs the
    updated template with the failed run's -p values."""
    argo.workflows["cifar-f41l5"] = failed_run([], {"epochs": "3"}, failed="deploy")
    assert resubmit("--set", "optimize.opt_batch=32", "--resubmit", "cifar-f41l5") == 0
    out = capsys.readouterr().out
    plan = plan_lines(out)
    assert plan["stage"].startswith("reused") and "from cifar-f41l5" in plan["stage"]
    assert plan["train"].startswith("reused") and "from cifar-f41l5" in plan["train"]
    assert plan["optimize"] == "to run  config changed"
    assert plan["benchmark"] == "to run  inputs: optimize runs again"
    assert "Resubmitting cifar-f41l5 as a new run of the current WorkflowTemplate" in out
    assert "(parameters: epochs=3)" in out
    assert [(r["method"], r["path"]) for r in argo.requests] == [
        ("GET", "/api/v1/workflows/argo/cifar-f41l5"),
        ("GET", "/api/v1/workflow-templates/argo/cifar-pipeline"),
        ("POST", "/api/v1/workflow-templates/argo"),
        ("POST", "/api/v1/workflows/argo"),
    ]
    template = argo.templates["cifar-pipeline"]
    optimize = next(t for t in template["spec"]["templates"] if t["name"] == "optimize")
    assert "optimize.opt_batch=32" in optimize["container"]["args"]  # the fix is in it
    wf = argo.requests[-1]["body"]["workflow"]
    assert wf["spec"]["workflowTemplateRef"] == {"name": "cifar-pipeline"}
    assert wf["spec"]["arguments"]["parameters"] == [{"name": "epochs", "value": "3"}]
    assert "Workflow cifar-x7k2p submitted to namespace argo" in out


@pytest.mark.parametrize(
    ("overrides", "failed", "wanted"),
    [
        pytest.param(
            [],
            "deploy",
            dict.fromkeys(MEMOIZED, "reused"),
            id="deploy-failed-nothing-changed",
        ),
        pytest.param(
            [],
            "train",
            {
                "stage": "reused",
                "train": "to run  it did not succeed in cifar-f41l5: nothing was saved",
                "optimize": "to run  it never ran in cifar-f41l5",
                "benchmark": "to run  it never ran in cifar-f41l5",
            },
            id="train-failed",
        ),
        pytest.param(
            ["images.tag=0.2.0"],
            "benchmark",
            {
                "stage": "to run  image changed",
                "train": "to run  image changed; inputs: stage runs again",
                "optimize": "to run  image changed; inputs: stage and train run again",
                "benchmark": "to run  it did not succeed in cifar-f41l5: nothing was saved",
            },
            id="new-release",
        ),
        pytest.param(
            ["train.label_smoothing=0.1"],
            "optimize",
            {
                "stage": "reused",
                "train": "to run  config changed",
                "optimize": "to run  it did not succeed in cifar-f41l5: nothing was saved",
                "benchmark": "to run  it never ran in cifar-f41l5",
            },
            id="train-setting",
        ),
    ],
)
def test_resubmit_dry_run_says_per_step_what_is_reused_and_why(
    argo: FakeArgo, capsys, overrides: list[str], failed: str, wanted: dict[str, str]
) -> None:
    argo.workflows["cifar-f41l5"] = failed_run([], {}, failed=failed)
    sets = [a for o in overrides for a in ("--set", o)]
    assert resubmit(*sets, "--resubmit", "cifar-f41l5", "--dry-run") == 0
    plan = plan_lines(capsys.readouterr().out)
    assert {step: line.split(" (from")[0] for step, line in plan.items()} == {
        step: (why if why != "reused" else "reused  key unchanged") for step, why in wanted.items()
    }
    assert [r["method"] for r in argo.requests] == ["GET"]  # nothing applied, nothing run


@pytest.mark.parametrize(
    ("name", "phase", "match"),
    [
        pytest.param(
            "cifar-gone1",
            None,
            r"--resubmit cifar-gone1: no workflow cifar-gone1 in namespace argo",
            id="no-such-workflow",
        ),
        pytest.param(
            "cifar-f41l5",
            "Succeeded",
            r"--resubmit cifar-f41l5: it is Succeeded, not Failed or Error",
            id="did-not-fail",
        ),
        pytest.param(
            "cifar-f41l5",
            "Running",
            r"--resubmit cifar-f41l5: it is Running, not Failed or Error",
            id="still-running",
        ),
    ],
)
def test_resubmit_of_a_run_that_is_not_there_or_did_not_fail_is_one_line(
    argo: FakeArgo, capsys, name: str, phase: str | None, match: str
) -> None:
    run = failed_run([], {}, failed="deploy")
    if phase:
        run["status"]["phase"] = phase
    argo.workflows["cifar-f41l5"] = run
    assert resubmit("--resubmit", name) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(match, err), err
    assert [r["method"] for r in argo.requests] == ["GET"]
