"""Issue #15: script templates, steps templates and templates nested in others, run by the
local runner as Argo runs them. Argo's own examples (tests/argo_examples/, unchanged but for
sleeps shortened where said) end as Argo ends them: the workflow's phase, each node's phase
under Argo's node name (less the workflow's: ``[0].step``, ``A.B``) and output values."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rich.console import Console

from flows.local.errors import UnsupportedFeature
from flows.local.view import print_summary
from flows.local.workflow import LocalRunner
from tests.helpers.local_examples import example, run, sh, states, steps_workflow


@pytest.mark.parametrize("name", ["scripts-python", "scripts-bash"])
def test_a_script_result_is_its_stdout_passed_to_the_next_step(tmp_path: Path, name: str) -> None:
    _, result = run(tmp_path, example(name))
    assert result.status == "Succeeded"
    assert states(result) == {"[0].generate": "Succeeded", "[1].print": "Succeeded"}
    number = result.tasks["[0].generate"].result
    assert 1 <= int(number) <= 100  # one trailing newline trimmed, as Argo does
    assert result.tasks["[1].print"].result == f"result was: {number}"


def test_steps_run_group_after_group_and_a_group_side_by_side(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("steps"))
    assert result.status == "Succeeded"
    assert {k: n.result for k, n in result.tasks.items()} == {
        "[0].hello1": "hello1", "[1].hello2a": "hello2a", "[1].hello2b": "hello2b",
    }  # fmt: skip
    first, second = result.tasks["[0].hello1"], result.tasks["[1].hello2a"]
    assert second.started >= first.finished


def test_a_container_entrypoint_is_the_only_node(tmp_path: Path) -> None:
    runner, result = run(tmp_path, example("hello-world"))
    assert result.status == "Succeeded"
    assert list(result.tasks) == [runner.name]
    assert result.tasks[runner.name].result == "hello world"


def test_dag_nested_runs_each_diamond_inside_the_outer_one(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("dag-nested"))
    assert result.status == "Succeeded"
    outer = ["A", "B", "C", "D"]
    assert {n: result.tasks[n].kind for n in outer} == dict.fromkeys(outer, "DAG")
    for o in outer:
        for i in outer:
            assert result.tasks[f"{o}.{i}"].result == o + i  # echo {{inputs...}}{{task}}
    assert result.tasks["B.A"].started >= result.tasks["A.D"].finished
    assert result.tasks["D.A"].started >= max(result.tasks[n].finished for n in ("B.D", "C.D"))


def test_output_parameter_example_passes_a_file_between_steps(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("output-parameter"))
    assert result.status == "Succeeded"
    assert result.tasks["[0].generate-parameter"].outputs == {"hello-param": "hello world"}
    assert result.tasks["[1].consume-parameter"].result == "hello world"


def test_withsequence_nested_result_loops_over_a_count_a_script_printed(tmp_path: Path) -> None:
    """``end: "{{steps.hello-a.outputs.result}}"`` from 1: one nested steps node per number,
    counting down to 0 when the script printed 0."""
    _, result = run(tmp_path, example("withsequence-nested-result"))
    assert result.status == "Succeeded"
    end = int(result.tasks["[0].hello-a"].result)
    numbers = list(range(1, end + 1)) if end >= 1 else [1, 0]
    outer = [f"[1].hello-b({i}:{n})" for i, n in enumerate(numbers)]
    assert [k for k in result.tasks if k.startswith("[1].hello-b(") and "[" not in k[4:]] == outer
    for node in outer:
        assert result.tasks[node].kind == "Steps" and result.tasks[node].state.value == "Succeeded"
        inner_end = int(result.tasks[f"{node}[0].hello-b"].result)
        inner = list(range(1, inner_end + 1)) if inner_end >= 1 else [1, 0]
        expected = [f"{node}[1].hello-c({i}:{n})" for i, n in enumerate(inner)]
        assert sorted(k for k in result.tasks if k.startswith(f"{node}[1].")) == sorted(expected)


def test_nested_steps_template_outputs_come_from_its_steps(tmp_path: Path) -> None:
    inner = {
        "name": "inner",
        "inputs": {"parameters": [{"name": "word"}]},
        "steps": [
            [{"name": "shout", "template": "shout",
              "arguments": {"parameters": [{"name": "w", "value": "{{inputs.parameters.word}}"}]}}]
        ],
        "outputs": {"parameters": [
            {"name": "loud", "valueFrom": {"parameter": "{{steps.shout.outputs.result}}"}},
            {"name": "fallback", "valueFrom": {"parameter": "{{steps.nope.outputs.result}}",
                                                "default": "dflt"}},
        ]},
    }  # fmt: skip
    shout = sh("shout", "echo {{inputs.parameters.w}} | tr a-z A-Z")
    shout["inputs"] = {"parameters": [{"name": "w"}]}
    consume = sh("consume", "echo got {{inputs.parameters.v}}")
    consume["inputs"] = {"parameters": [{"name": "v"}]}
    manifest = steps_workflow(
        [
            [{"name": "call", "template": "inner",
              "arguments": {"parameters": [{"name": "word", "value": "hey"}]}}],
            [{"name": "use", "template": "consume", "arguments": {"parameters": [
                {"name": "v", "value": "{{steps.call.outputs.parameters.loud}}"}]}}],
        ],
        [inner, shout, consume],
    )  # fmt: skip
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert result.tasks["[0].call"].outputs == {"loud": "HEY", "fallback": "dflt"}
    assert result.tasks["[0].call[0].shout"].result == "HEY"
    assert result.tasks["[1].use"].result == "got HEY"


def test_a_failed_step_fails_its_group_and_no_later_group_runs(tmp_path: Path) -> None:
    manifest = steps_workflow(
        [
            [{"name": "ok", "template": "ok"}, {"name": "bad", "template": "bad"}],
            [{"name": "later", "template": "ok"}],
        ],
        [sh("ok", "sleep 0.2"), sh("bad", "exit 3")],
    )
    runner, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert states(result) == {"[0].ok": "Succeeded", "[0].bad": "Failed"}  # the group waits
    assert runner.root.message == "child '[0].bad' failed"
    assert result.failed_task.name == "[0].bad"
    console = Console(record=True, width=300)
    print_summary(result, runner, console)
    log = result.run_dir / "logs" / "_0_.bad.log"  # the log the summary names exists
    assert f"last lines of {log}" in console.export_text() and log.is_file()


def test_continue_on_fail_example_succeeds_past_the_failed_step(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("continue-on-fail"))
    assert result.status == "Succeeded"
    assert states(result) == {
        "[0].A": "Succeeded", "[1].B": "Succeeded", "[1].C": "Failed", "[2].D": "Succeeded",
    }  # fmt: skip


def test_an_exit_handler_may_be_a_steps_template(tmp_path: Path) -> None:
    manifest = steps_workflow(
        [[{"name": "work", "template": "ok"}]],
        [
            sh("ok", "true"),
            {"name": "bye", "steps": [[{"name": "report", "template": "report"}]]},
            sh("report", f"echo {{{{workflow.status}}}} > {tmp_path}/status"),
        ],
        onExit="bye",
    )
    runner, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert runner.exit_task.state.value == "Succeeded" and runner.exit_task.kind == "Steps"
    assert result.tasks["onExit[0].report"].state.value == "Succeeded"
    assert (tmp_path / "status").read_text().strip() == "Succeeded"


def test_resume_keeps_the_nested_nodes_that_succeeded(tmp_path: Path) -> None:
    flag = tmp_path / "fixed"
    inner = {
        "name": "inner",
        "dag": {"tasks": [
            {"name": "count", "template": "count"},
            {"name": "flaky", "template": "flaky", "depends": "count"},
        ]},
    }  # fmt: skip
    manifest = steps_workflow(
        [[{"name": "stage", "template": "inner"}]],
        [inner, sh("count", f"echo run >> {tmp_path}/count"), sh("flaky", f"test -e {flag}")],
    )
    runner, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert states(result)["[0].stage.flaky"] == "Failed"
    flag.touch()
    resumed = LocalRunner.resume(runner.run_dir, cache_dir=tmp_path / "cache", cwd=tmp_path)
    again = resumed.run()
    assert again.status == "Succeeded"
    assert again.tasks["[0].stage.count"].message == "kept from the earlier run"
    assert (tmp_path / "count").read_text().split() == ["run"]  # not run twice


def test_script_state_json_keeps_results_and_node_kinds(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("scripts-python"))
    saved = json.loads((result.run_dir / "state.json").read_text())["tasks"]
    assert saved["[0].generate"]["result"] == result.tasks["[0].generate"].result
    assert saved["[0].generate"]["kind"] == "Pod"


def test_timeouts_step_example_stops_the_pod_at_its_deadline(tmp_path: Path) -> None:
    manifest = example("timeouts-step")
    manifest["spec"]["templates"][0]["activeDeadlineSeconds"] = 1  # 10 in the example
    begun = time.monotonic()
    runner, result = run(tmp_path, manifest)
    assert time.monotonic() - begun < 8
    assert result.status == "Failed"
    assert result.tasks[runner.name].result == "123"


def test_step_level_timeout_fails_both_steps_and_the_workflow(tmp_path: Path) -> None:
    """Each ``sleep 30s`` is stopped at its template's ``timeout`` (10s in the example, 1s
    here): a pod past its deadline is Failed, not Errored, so ``continueOn: {error: true}``
    does not cover sleep1 and the workflow fails; sleep2 continues on failure."""
    manifest = example("step-level-timeout")
    for step in manifest["spec"]["templates"][0]["steps"][0]:
        step["arguments"]["parameters"][0]["value"] = "1s"
    begun = time.monotonic()
    runner, result = run(tmp_path, manifest)
    assert time.monotonic() - begun < 10
    assert result.status == "Failed"
    assert states(result) == {"[0].sleep1": "Failed", "[0].sleep2": "Failed"}
    assert runner.root.message == "child '[0].sleep1' failed"


def test_dag_task_level_timeout_fails_only_the_task_past_its_timeout(tmp_path: Path) -> None:
    """Argo's example scaled by 1/10: ``sleep 1.5s`` under timeouts of 2s, 1s and 2s."""
    manifest = example("dag-task-level-timeout")
    tasks = manifest["spec"]["templates"][0]["dag"]["tasks"]
    for task in tasks:
        parameter = task["arguments"]["parameters"][0]
        parameter["value"] = {"20s": "2s", "10s": "1s"}[parameter["value"]]
    manifest["spec"]["templates"][1]["container"]["command"] = ["sleep", "1.5s"]
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert states(result) == {"A": "Succeeded", "B": "Failed", "C": "Succeeded"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nested-workflow", "template nested-workflow-example step nested-wf: artifact"),
    ],
)
def test_examples_with_what_is_not_implemented_are_refused_by_name(
    tmp_path: Path, name: str, message: str
) -> None:
    with pytest.raises(UnsupportedFeature, match="does not implement") as refused:
        LocalRunner(example(name), tmp_path / "runs")
    assert message in str(refused.value)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("field", ["retryStrategy", "memoize", "activeDeadlineSeconds"])
def test_what_would_retry_or_stop_a_whole_steps_template_is_refused(
    tmp_path: Path, field: str
) -> None:
    value = {"retryStrategy": {"limit": 1}, "memoize": {"key": "k"}}.get(field, 5)
    manifest = steps_workflow([[{"name": "s", "template": "ok"}]], [sh("ok", "true")])
    manifest["spec"]["templates"][0][field] = value
    with pytest.raises(UnsupportedFeature, match=f"template main: {field} on a steps template"):
        LocalRunner(manifest, tmp_path / "runs")


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ({"image": "node:20", "command": ["node"], "source": "1"}, "script command 'node'"),
        ({"image": "python:3", "source": "print(1)"}, "script has no command"),
    ],
)
def test_a_script_whose_interpreter_is_only_in_its_image_is_refused(
    tmp_path: Path, script: dict, message: str
) -> None:
    manifest = steps_workflow([[{"name": "s", "template": "s"}]], [{"name": "s", "script": script}])
    with pytest.raises(UnsupportedFeature, match=message):
        LocalRunner(manifest, tmp_path / "runs")


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        pytest.param(
            [[{"name": "bad", "template": "bad"}, {"name": "after", "template": "ok"}]],
            {"[0].bad": "Failed", "[0].after": "Omitted"},
            id="the failing group first",
        ),
        pytest.param(
            [
                [{"name": "first", "template": "ok"}],
                [{"name": "bad", "template": "bad"}, {"name": "after", "template": "ok"}],
            ],
            {"[0].first": "Succeeded", "[1].bad": "Failed", "[1].after": "Omitted"},
            id="after a group that succeeded",
        ),
    ],
)
def test_fail_fast_holds_in_every_group_of_a_steps_template(
    tmp_path: Path, groups: list[list[dict]], expected: dict[str, str]
) -> None:
    """Issue #23: with ``failFast: true`` and ``parallelism: 1`` (Argo's checkParallelism),
    no step of a group starts after one failed: in the second group as in the first (the
    runner used to read ``failFast`` from the previous group's child template)."""
    templates = [sh("ok", "echo ok"), sh("bad", "exit 1")]
    manifest = steps_workflow(groups, templates)
    manifest["spec"]["templates"][0].update(failFast=True, parallelism=1)
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert states(result) == expected
