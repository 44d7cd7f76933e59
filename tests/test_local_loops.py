"""Issue #15: loops (withItems, withParam, withSequence) on DAG tasks and steps, their
aggregated outputs, template and workflow parallelism, continueOn in a DAG, and the retry
backoff's cap and maxDuration, as Argo does them. Argo's examples are in tests/argo_examples/
(their sleeps shortened where said, so the tests stay short)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from flows.local.nodes.loops import aggregate, item_scope, node_name, sequence
from flows.local.status import TaskRecord, TaskState
from tests.helpers.local_examples import example, run, states
from tests.helpers.loop_workflows import dag_workflow, max_overlap, sh, timed, timed_example


# --- naming and expansion, as Argo's processItem / generateNodeName / expandSequence -------
@pytest.mark.parametrize(
    ("value", "name", "scope"),
    [
        ("hello world", "t(0:hello world)", {"item": "hello world"}),
        (7, "t(0:7)", {"item": "7"}),
        (True, "t(0:true)", {"item": "true"}),
        (
            {"tag": "9.1", "image": "debian"},
            "t(0:image:debian,tag:9.1)",
            {"item": '{"image":"debian","tag":"9.1"}', "item.tag": "9.1", "item.image": "debian"},
        ),
        ([1, "a"], "t(0:[1 a])", {"item": '[1,"a"]'}),
        ("f(x)", "t(0:fx)", {"item": "f(x)"}),
    ],
)
def test_items_are_named_and_substituted_as_argo_does(value: Any, name: str, scope: dict) -> None:
    assert node_name("t", 0, value) == name
    assert item_scope(value) == scope


@pytest.mark.parametrize(
    ("spec", "items"),
    [
        ({"count": "3"}, ["0", "1", "2"]),
        ({"count": 0}, []),
        ({"start": "5", "end": "3"}, ["5", "4", "3"]),
        ({"start": "1", "count": "2", "format": "u%02X"}, ["u01", "u02"]),
    ],
)
def test_with_sequence_counts_as_argo_does(spec: dict, items: list[str]) -> None:
    assert sequence(spec) == items


def test_aggregated_outputs_are_json_lists_in_item_order() -> None:
    def node(index: int, state: TaskState, result: str, **outputs: str) -> TaskRecord:
        return TaskRecord(f"g({index}:x)", "t", state=state, outputs=outputs, result=result)

    nodes = [
        node(10, TaskState.SUCCEEDED, '{"n": 10}', p="b", m='{"k": 2}'),
        node(2, TaskState.SUCCEEDED, '{"n": 2}', p="a", m='{"k": 1}'),
        node(3, TaskState.FAILED, "not json", p="lost"),  # a failed node is left out
    ]
    scope = aggregate("tasks", "g", nodes)
    assert json.loads(scope["tasks.g.outputs.parameters"]) == [
        {"p": "a", "m": '{"k": 1}'}, {"p": "b", "m": '{"k": 2}'},
    ]  # fmt: skip
    assert scope["tasks.g.outputs.parameters.p"] == '["a","b"]'
    assert scope["tasks.g.outputs.parameters.m"] == '[{"k":1},{"k":2}]'  # JSON maps parsed
    assert scope["tasks.g.outputs.result"] == '[{"n":2},{"n":10}]'


# --- Argo's loop examples ---------------------------------------------------------------------
def test_loops_example_runs_one_step_per_item(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("loops"))
    assert result.status == "Succeeded"
    assert {k: n.result for k, n in result.tasks.items()} == {
        "[0].print-message-loop(0:hello world)": "hello world",
        "[0].print-message-loop(1:goodbye world)": "goodbye world",
    }


@pytest.mark.parametrize("name", ["loops-maps", "loops-param-argument"])
def test_loops_over_maps_name_each_node_by_its_sorted_keys(tmp_path: Path, name: str) -> None:
    _, result = run(tmp_path, example(name))
    assert result.status == "Succeeded"
    assert list(result.tasks) == [
        "[0].test-linux(0:image:debian,tag:9.1)",
        "[0].test-linux(1:image:debian,tag:8.9)",
        "[0].test-linux(2:image:alpine,tag:3.6)",
        "[0].test-linux(3:image:ubuntu,tag:17.10)",
    ]


def test_loops_dag_waits_for_the_whole_loop(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("loops-dag"))
    assert result.status == "Succeeded"
    assert states(result) == {
        "A": "Succeeded", "B": "Succeeded", "C": "Succeeded",
        "B(0:foo)": "Succeeded", "B(1:bar)": "Succeeded", "B(2:baz)": "Succeeded",
    }  # fmt: skip
    assert result.tasks["B"].kind == "TaskGroup"
    loop = [result.tasks[f"B({i}:{w})"] for i, w in enumerate(["foo", "bar", "baz"])]
    assert [n.result for n in loop] == ["foo", "bar", "baz"]
    assert result.tasks["C"].started >= max(n.finished for n in loop)


def test_loops_sequence_example(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("loops-sequence"))
    assert result.status == "Succeeded"
    expected = {
        "sequence-count": ["0", "1", "2", "3", "4"],
        "sequence-start-end": ["100", "101", "102", "103", "104", "105"],
        "sequence-param": ["200", "201", "202"],  # count from {{workflow.parameters.count}}
        "sequence-negative": ["5", "4", "3", "2", "1", "0"],
        "sequence-format": [f"testuser0{i}" for i in range(5)],
    }
    for step, items in expected.items():
        names = [f"[0].{step}({i}:{item})" for i, item in enumerate(items)]
        assert [result.tasks[n].result for n in names] == items


def test_loops_param_result_loops_over_a_script_json_output(tmp_path: Path) -> None:
    manifest = example("loops-param-result")
    sleep = manifest["spec"]["templates"][2]["container"]
    sleep["args"] = [sleep["args"][0].replace("sleep {{inputs.parameters.seconds}}", "true")]
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert result.tasks["[0].generate"].result == json.dumps(list(range(20, 31)))
    loop = [k for k in result.tasks if k.startswith("[1].sleep(")]
    assert loop == [f"[1].sleep({i}:{n})" for i, n in enumerate(range(20, 31))]


@pytest.mark.parametrize("kind", ["dag", "steps"])
def test_a_loop_outputs_reach_the_next_task_aggregated(tmp_path: Path, kind: str) -> None:
    gen = sh(
        "gen",
        'echo -n "v{{inputs.parameters.n}}" > /tmp/out/p; echo \'{"n": {{inputs.parameters.n}}}\'',
        "n",
        outputs={"parameters": [{"name": "p", "valueFrom": {"path": "/tmp/out/p"}}]},
    )
    show = sh("show", "echo '{{inputs.parameters.a}}|{{inputs.parameters.b}}'", "a", "b")
    loop = {
        "name": "gen", "template": "gen", "withSequence": {"start": "1", "end": "3"},
        "arguments": {"parameters": [{"name": "n", "value": "{{item}}"}]},
    }  # fmt: skip
    ref = "tasks" if kind == "dag" else "steps"
    use = {
        "name": "show", "template": "show",
        "arguments": {"parameters": [
            {"name": "a", "value": f"{{{{{ref}.gen.outputs.parameters.p}}}}"},
            {"name": "b", "value": f"{{{{{ref}.gen.outputs.result}}}}"},
        ]},
    }  # fmt: skip
    if kind == "dag":
        manifest = dag_workflow([loop, {**use, "depends": "gen"}], [gen, show])
    else:
        manifest = dag_workflow([], [gen, show])
        manifest["spec"]["templates"][0] = {"name": "main", "steps": [[loop], [use]]}
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    shown = result.tasks["show" if kind == "dag" else "[1].show"].result
    assert shown == '["v1","v2","v3"]|[{"n":1},{"n":2},{"n":3}]'


def test_with_param_from_a_task_and_an_empty_list_skips(tmp_path: Path) -> None:
    tasks = [
        {"name": "list", "template": "list"},
        {
            "name": "each", "template": "echo", "depends": "list",
            "withParam": "{{tasks.list.outputs.result}}",
            "arguments": {"parameters": [{"name": "m", "value": "{{item.name}}"}]},
        },
        {"name": "none", "template": "echo", "withParam": "[]",
         "arguments": {"parameters": [{"name": "m", "value": "{{item}}"}]}},
        {"name": "after", "template": "echo", "depends": "none",
         "arguments": {"parameters": [{"name": "m", "value": "ran"}]}},
    ]  # fmt: skip
    templates = [
        sh("list", """echo '[{"name": "x"}, {"name": "y"}]'"""),
        sh("echo", "echo {{inputs.parameters.m}}", "m"),
    ]
    _, result = run(tmp_path, dag_workflow(tasks, templates))
    assert result.status == "Succeeded"
    assert result.tasks["each(0:name:x)"].result == "x"
    assert result.tasks["each(1:name:y)"].result == "y"
    assert result.tasks["none"].state is TaskState.SKIPPED
    assert result.tasks["none"].message == "Skipped, empty params"
    assert result.tasks["after"].result == "ran"  # a Skipped dependency counts as done


def test_a_with_param_that_is_not_a_list_is_an_error(tmp_path: Path) -> None:
    tasks = [{"name": "bad", "template": "echo", "withParam": '{"a": 1}',
              "arguments": {"parameters": [{"name": "m", "value": "{{item}}"}]}}]  # fmt: skip
    _, result = run(
        tmp_path, dag_workflow(tasks, [sh("echo", "echo {{inputs.parameters.m}}", "m")])
    )
    assert result.status == "Error"
    assert result.tasks["bad"].state is TaskState.ERROR
    assert result.tasks["bad"].message.startswith(
        'withParam value could not be parsed as a JSON list: {"a": 1}'
    )


def test_a_failed_item_fails_the_loop_and_its_dependents_are_omitted(tmp_path: Path) -> None:
    tasks = [
        {"name": "loop", "template": "maybe", "withItems": [0, 1, 0],
         "arguments": {"parameters": [{"name": "code", "value": "{{item}}"}]}},
        {"name": "next", "template": "maybe", "depends": "loop",
         "arguments": {"parameters": [{"name": "code", "value": "0"}]}},
    ]  # fmt: skip
    _, result = run(
        tmp_path, dag_workflow(tasks, [sh("maybe", "exit {{inputs.parameters.code}}", "code")])
    )
    assert result.status == "Failed"
    assert states(result) == {
        "loop": "Failed", "next": "Omitted",
        "loop(0:0)": "Succeeded", "loop(1:1)": "Failed", "loop(2:0)": "Succeeded",
    }  # fmt: skip


# --- continueOn in a DAG ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("continue_on", "status", "after"),
    [
        ({"failed": True}, "Succeeded", "Succeeded"),
        ({"error": True}, "Failed", "Omitted"),  # a non-zero exit is Failed, not Error
        (None, "Failed", "Omitted"),
    ],
)
def test_continue_on_decides_whether_dependents_run(
    tmp_path: Path, continue_on: dict | None, status: str, after: str
) -> None:
    first = {"name": "A", "template": "fail"}
    if continue_on:
        first["continueOn"] = continue_on
    tasks = [first, {"name": "B", "template": "ok", "dependencies": ["A"]}]
    _, result = run(tmp_path, dag_workflow(tasks, [sh("ok", "true"), sh("fail", "exit 1")]))
    assert result.status == status
    assert states(result) == {"A": "Failed", "B": after}


def test_a_leaf_that_continues_on_failure_does_not_fail_the_dag(tmp_path: Path) -> None:
    tasks = [
        {"name": "A", "template": "ok"},
        {"name": "B", "template": "fail", "depends": "A", "continueOn": {"failed": True}},
    ]
    _, result = run(tmp_path, dag_workflow(tasks, [sh("ok", "true"), sh("fail", "exit 1")]))
    assert result.status == "Succeeded"
    assert states(result) == {"A": "Succeeded", "B": "Failed"}
    failures = json.loads(json.loads(result.globals["workflow.failures"]))  # quoted, as Argo
    assert [f["displayName"] for f in failures] == ["B"]


# --- parallelism ----------------------------------------------------------------------------
def test_parallelism_nested_limits_each_worker_not_the_workers(tmp_path: Path) -> None:
    """4 seq-workers (parallelism 1) side by side, each running its 4 jobs one at a time."""
    log = tmp_path / "log"
    manifest = timed_example("parallelism-nested", log, "parallel-id")
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    lines = log.read_text().splitlines()
    assert len(lines) == 32
    assert all(max_overlap(lines, f" {worker}") == 1 for worker in "1234")
    assert max_overlap(lines) > 1
    assert "[0].parallel-worker(0:1)[0].seq-step(3:d)" in result.tasks


def test_parallelism_nested_dag_runs_two_of_three_at_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    manifest = timed_example("parallelism-nested-dag", log, "msg")
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    nested = [result.tasks[n] for n in ("b2", "b3", "b4")]
    starts = sorted(n.started for n in nested)
    # the third of b2..b4 starts only when one of the first two finished (A's parallelism 2)
    assert starts[2] >= min(n.finished for n in nested if n.started < starts[2])


def test_parallelism_nested_workflow_runs_one_loop_item_at_a_time(tmp_path: Path) -> None:
    log = tmp_path / "log"
    manifest = timed_example("parallelism-nested-workflow", log, "seq-id")
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    outer = [result.tasks[f"[0].seq-step({i}:{s})"] for i, s in enumerate("abcd")]
    for before, after in itertools.pairwise(outer):
        assert after.started >= before.finished
    lines = log.read_text().splitlines()
    assert max_overlap(lines) == 2  # each B runs its two jobs side by side


def test_workflow_parallelism_counts_pods_across_nested_templates(tmp_path: Path) -> None:
    log = tmp_path / "log"
    inner = {"name": "inner", "dag": {"tasks": [
        {"name": "x", "template": "job"}, {"name": "y", "template": "job"}]}}  # fmt: skip
    tasks = [{"name": "a", "template": "inner"}, {"name": "b", "template": "inner"}]
    manifest = dag_workflow(tasks, [inner, sh("job", timed(log, "0.2"))], parallelism=2)
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert max_overlap(log.read_text().splitlines()) == 2


def test_template_parallelism_limits_a_loop(tmp_path: Path) -> None:
    log = tmp_path / "log"
    tasks = [{"name": "loop", "template": "job", "withSequence": {"count": "5"}}]
    manifest = dag_workflow(tasks, [sh("job", timed(log, "0.2"))], main={"parallelism": 2})
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert max_overlap(log.read_text().splitlines()) == 2
