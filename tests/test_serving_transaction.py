"""Deploy as a transaction (issue 30), in the rendered pipeline: which tasks run after a
failed deploy or check, how the check is retried, how long it waits, and where a run ends.

The serving part of the rendered DAG (benchmark, deploy, serve-check and the three
rollbacks, their ``depends`` and ``when`` exactly as rendered) is run by the local runner
with each template's process made to exit as a scenario says: what is under test is the
wiring Argo evaluates (v4.0.5 workflow/controller/dag.go: ``depends``, assessDAGPhase),
not the steps, which tests/test_serve_check.py and tests/test_local_rollback.py run for
real."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from flows.cifar import build_template
from flows.local.expr.evaluate import environment, evaluate
from flows.pipeline.serving_templates import CHECK_FINAL_EXITS
from flows.pipeline.step_template import retry_expression
from steps.common.config import load_config
from tests.helpers.flow_helpers import CONFIGS, templates
from tests.helpers.local_examples import run, states
from tests.helpers.paths import REPO_ROOT

SERVING = ("deploy", "serve-check", "rollback-alias", "rollback-apply", "rollback-delete")
WRITE = """
import pathlib, sys
out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rest = sys.argv[3:]
given = rest[rest.index("--") + 1 :]
for pair in rest[: rest.index("--")]:
    name, value = pair.split("=", 1)
    (out / name).write_text(value)
print("inputs:", *given, sep="\\n")
sys.exit(int(sys.argv[2]))
"""


def pipeline(tmp_path: Path, exits: dict[str, int], previous: str) -> dict[str, Any]:
    """The smoke config's DAG from benchmark on, each template a process exiting with
    ``exits[name]`` (0 if not given) and writing the outputs the tasks read."""
    wt = build_template(load_config(REPO_ROOT / "configs" / "smoke.yaml")).to_dict()
    found = templates(wt)
    dag = found[wt["spec"]["entrypoint"]]["dag"]["tasks"]
    # benchmark-reused and benchmark-again as rendered: this run's own benchmark (its
    # workflow output names this Workflow) skips both, as a benchmark that ran does
    reuse = ("benchmark-reused", "benchmark-again")
    tasks = [dict(t) for t in dag if t["name"] in ("benchmark", *reuse, *SERVING)]
    tasks[0] = {"name": "benchmark", "template": "benchmark"}
    outputs = {
        "benchmark": {
            "promoted": "true",
            "model-version": "7",
            "previous-version": previous,
            "report-uri": "s3://b/benchmark.json",
            "serving-image": "cifar-serve:new",
            "previous-serving-image": "cifar-serve:old" if previous else "",
            "workflow": "serving",
        },
        "deploy": {"url": "http://127.0.0.1:9"},
    }
    made = []
    for task in tasks:
        name = task["template"]
        if task["name"] == "benchmark-again" or name == "reuse-check":
            if task["name"] == "benchmark-reused":  # its outputs' defaults, as skipped
                container = {"image": "i", "command": ["false"]}
                made.append({"name": name, "container": container, **outputs_of(found[name])})
            continue  # never runs: the check sees this run's benchmark
        for argument in task.get("arguments", {}).get("parameters", []):
            argument["value"] = (
                argument["value"]
                .replace("{{tasks.create-run.outputs.parameters.run-id}}", "run")
                .replace("{{tasks.stage.outputs.parameters.dataset-uri}}", "data")
            )
            if "tasks['stage'].outputs.parameters['dataset-uri']" in argument["value"]:
                argument["value"] = "data"  # the staged data (Reuse.output over stage)
        out = tmp_path / "out" / name
        values = [f"{k}={v}" for k, v in outputs.get(name, {}).items()]
        container = {"image": "i", "command": [sys.executable, "-c", WRITE, str(out)]}
        container["args"] = [str(exits.get(name, 0)), *values, "--"]
        template: dict[str, Any] = {"name": name, "container": container}
        if "inputs" in found[name] and name != "benchmark":
            params = found[name]["inputs"]["parameters"]
            template["inputs"] = {"parameters": params}
            container["args"] += [f"{{{{inputs.parameters.{p['name']}}}}}" for p in params]
        if name in outputs:
            params = [{"name": k, "valueFrom": {"path": str(out / k)}} for k in outputs[name]]
            template["outputs"] = {"parameters": params}
        made.append(template)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "serving"},
        "spec": {
            "entrypoint": "main",
            "templates": [{"name": "main", "dag": {"tasks": tasks}}, *made],
        },
    }


def outputs_of(template: dict[str, Any]) -> dict[str, Any]:
    """A rendered template's declared outputs (what a Skipped task of it hands on)."""
    return {"outputs": template["outputs"]} if "outputs" in template else {}


SCENARIOS = {  # name -> (exits, previous version, task states, workflow phase)
    "deploy-fails-over-a-previous-version": (
        {"deploy": 1},
        "6",
        {"serve-check": "Omitted", "rollback-alias": "Succeeded",
         "rollback-apply": "Succeeded", "rollback-delete": "Skipped"},
        "Failed",
    ),
    "first-deploy-fails": (
        {"deploy": 1},
        "",
        {"serve-check": "Omitted", "rollback-alias": "Succeeded",
         "rollback-apply": "Skipped", "rollback-delete": "Succeeded"},
        "Failed",
    ),
    "check-verdict": (
        {"serve-check": 3},
        "6",
        {"serve-check": "Failed", "rollback-alias": "Succeeded",
         "rollback-apply": "Succeeded", "rollback-delete": "Skipped"},
        "Failed",
    ),
    "check-passes": (
        {},
        "6",
        {"serve-check": "Succeeded", "rollback-alias": "Omitted",
         "rollback-apply": "Omitted", "rollback-delete": "Omitted"},
        "Succeeded",
    ),
}  # fmt: skip


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_failed_deploy_rolls_back_as_a_failed_check_does(tmp_path: Path, scenario: str) -> None:
    """Defect 1: a failed (or timed-out) deploy used to leave serve-check and both
    rollbacks Omitted, the service and the alias on the broken version. Now the alias
    and the service go back after either, and the run ends Failed all the same."""
    exits, previous, wanted, phase = SCENARIOS[scenario]
    _, result = run(tmp_path, pipeline(tmp_path, exits, previous))
    got = states(result)
    assert {name: got.get(name) for name in wanted} == wanted, got
    assert result.status == phase
    if got.get("rollback-alias") == "Succeeded":
        log = (result.run_dir / "logs" / "rollback-alias.log").read_text()
        deploy = "Failed" if exits.get("deploy") else "Succeeded"
        assert f"the deployment of v7 failed (deploy {deploy}, or its live check)" in log


@pytest.mark.parametrize(
    ("exit_code", "retried"),
    [("3", False), ("2", False), ("1", True), ("137", True), ("-1", True)],
    ids=["verdict", "user-error", "no-verdict", "killed", "no-exit-code"],
)
def test_the_check_is_retried_only_without_a_verdict(exit_code: str, retried: bool) -> None:
    """serve-check's retryStrategy.expression, as Argo evaluates it after a failed attempt
    (operator.go processNodeRetries; lastRetry.exitCode a string, "-1" without one): the
    endpoint's verdict (steps.serve_check VERDICT_EXIT) and a user error are final."""
    from steps.serve_check.step import VERDICT_EXIT

    assert VERDICT_EXIT in CHECK_FINAL_EXITS
    expression = retry_expression(CHECK_FINAL_EXITS)
    assert expression is not None
    scope = {"lastRetry.exitCode": exit_code, "lastRetry.status": "Failed"}
    assert evaluate(expression, environment(scope)) is retried


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_check_waits_as_long_as_the_deploy_may_take(path: Path) -> None:
    """Defect 2: serve-check waited a fixed 60 s for the new version while deploy (which
    reads the previous version's Ready at once on a re-apply) may take
    serving.ready_timeout_s; and it was retried on any failure."""
    cfg = load_config(path)
    check = templates(build_template(cfg).to_dict())["serve-check"]
    args = check["container"]["args"]
    assert float(args[args.index("--wait-s") + 1]) == cfg.serving.ready_timeout_s
    assert check["retryStrategy"]["expression"] == retry_expression(CHECK_FINAL_EXITS)
    assert int(check["activeDeadlineSeconds"]) > cfg.serving.ready_timeout_s
