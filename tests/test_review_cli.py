"""Issue 41: ``list``, ``get`` and ``logs`` print local runs as the argo CLI prints cluster
workflows (argo-workflows v4.0.5 cmd/argo/commands/list.go, get.go, logs.go,
common/get.go, util/printer/workflow-printer.go, util/humanize/humanize.go), against real
runs of Argo's own examples (conftest.py's ``example_runs``), and ``get -o json`` in the
shape of Argo's Workflow (the v4.0.5 JSON schema in ../shared/schemas). The smoke run's:
tests/test_review_smoke.py."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from flows.local.review import humanize
from flows.local.review.argo_workflow import workflow_status
from flows.local.review.get import print_workflow
from flows.local.review.logs import print_logs
from flows.local.review.node_tree import fnv32a, node_id, pod_name
from flows.local.review.runs import load_state
from flows.local.workflow import LocalRunner
from tests.helpers.review_helpers import check_argo_shape, cli


# --- Argo's own formats ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("seconds", "short", "long"),
    [  # util/humanize/humanize_test.go, and go-humanize's magnitudes around each edge
        (0, "0s", "0 seconds"),
        (0.9, "0s", "0 seconds"),
        (1, "1s", "1 second"),
        (59, "59s", "59 seconds"),
        (60, "1m", "1 minute 0 seconds"),
        (90, "1m", "1 minute 30 seconds"),
        (119, "1m", "1 minute 59 seconds"),
        (120, "2m", "2 minutes 0 seconds"),
        (3600, "1h", "1 hour 0 minutes"),
        (5400, "1h", "1 hour 30 minutes"),
        (7200, "2h", "2 hours 0 minutes"),
        (86400, "1d", "1 day 0 hours"),
        (3 * 86400, "3d", "3 days 0 hours"),
        (29 * 86400, "29d", "4 weeks 0 hours"),
        (30 * 86400, "30d", "1 month 0 hours"),
    ],
)
def test_durations_read_as_argo_humanizes_them(seconds: float, short: str, long: str) -> None:
    assert humanize.short(1000.0, 1000.0 + seconds) == short
    assert humanize.long(1000.0, 1000.0 + seconds) == long


def test_ids_and_pod_names_hash_as_argo_does() -> None:
    """Go's hash/fnv test vectors (fnv_test.go golden32a); NodeID and GeneratePodName
    (workflow_types.go, workflow/util/pod_name.go)."""
    assert [fnv32a(t) for t in ("", "a", "ab", "abc")] == [
        0x811C9DC5, 0xE40C292C, 0x4D2505CA, 0x1A47E90B,
    ]  # fmt: skip
    assert node_id("wf", "wf") == "wf" and node_id("wf", "wf.A") == f"wf-{fnv32a('wf.A')}"
    assert pod_name("wf", "wf", "main") == "wf"
    assert pod_name("wf", "wf.A", "echo") == f"wf-echo-{fnv32a('wf.A')}"


ITEMS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
         "ten", "eleven", "twelve"]  # fmt: skip
STARTS = [21, 21, 21, 21, 21, 21, 21, 21, 21, 21, 22, 22, 22]  # 16:04:xx, as Argo's test
ENDS = [48, 53, 51, 54, 50, 47, 56, 57, 42, 40, 45, 44, 59]


def test_get_prints_argo_get_tests_workflow_as_argo_get_does() -> None:
    """cmd/argo/commands/common/get_test.go Test_printWorkflowHelper/IndexOrdering: the
    steps of one group with 13 items, ordered by index at the same start, in tabwriter's
    columns: the same three lines it asserts."""
    name = "many-items-z26lj"
    nodes = {}
    group = node_id(name, f"{name}[0]")
    items = []
    for index, item in enumerate(ITEMS):
        full = f"{name}[0].sleep({index}:{item})"
        items.append(node_id(name, full))
        nodes[items[-1]] = {
            "id": items[-1], "name": full, "displayName": f"sleep({index}:{item})",
            "type": "Pod", "templateName": "sleep", "phase": "Succeeded", "boundaryID": name,
            "startedAt": f"2020-06-02T16:04:{STARTS[index]}Z",
            "finishedAt": f"2020-06-02T16:04:{ENDS[index]}Z", "children": [],
        }  # fmt: skip
    nodes[name] = {"id": name, "name": name, "displayName": name, "type": "Steps",
                   "templateName": "parallel-sleep", "phase": "Succeeded",
                   "startedAt": "2020-06-02T16:04:21Z", "finishedAt": "2020-06-02T16:05:01Z",
                   "children": [group]}  # fmt: skip
    nodes[group] = {"id": group, "name": f"{name}[0]", "displayName": "[0]",
                    "type": "StepGroup", "templateName": "parallel-sleep",
                    "phase": "Succeeded", "boundaryID": name,
                    "startedAt": "2020-06-02T16:04:21Z", "children": items}  # fmt: skip
    workflow = {"metadata": {"name": name, "namespace": "argo"}, "spec": {},
                "status": {"phase": "Succeeded", "nodes": nodes}}  # fmt: skip
    out = print_workflow(workflow, colour=False)
    for item, seconds in (("sleep(9:nine)     ", 19), ("sleep(10:ten)     ", 23),
                          ("sleep(11:eleven)  ", 22)):  # fmt: skip
        full = f"{name}[0].{item.strip()}"
        assert f"{item}sleep           {pod_name(name, full, 'sleep')}  {seconds}s" in out
    shown = re.findall(r"sleep\((\d+):", out)
    assert shown == [str(i) for i in range(13)]  # by index, not by name: 10 after 9


# --- get, against real runs --------------------------------------------------------------
def tree(out: str) -> list[str]:
    """get's tree, each line's trailing padding dropped."""
    return [line.rstrip() for line in out.split("\n\n", 1)[1].splitlines()]


def test_get_prints_a_failed_run_and_its_exit_handler(example_runs, capsys) -> None:
    """Argo's examples/exit-handlers.yaml: the failed pod entrypoint, a blank line, the
    exit handler's steps joined by a group's glyphs; the workflow Failed with the pod's
    message; the Skipped step with its when, no pod, no duration."""
    code, out, _ = cli(capsys, "get", str(example_runs["exit-handlers"]))
    assert code == 0
    assert re.search(r"^Status: +Failed$", out, re.M)
    assert re.search(r"^Message: +exited with code 1 after 1 attempt\(s\)$", out, re.M)
    assert re.search(r"^Progress: +2/3$", out, re.M)  # 2 of 3 pods done, the failed one not
    lines = tree(out)
    assert lines[0].split() == ["STEP", "TEMPLATE", "PODNAME", "DURATION", "MESSAGE"]
    failed = r" ✖ exit-handlers +intentional-fail +exit-handlers +0s +exited with code 1 after"
    assert re.fullmatch(failed + r" 1 attempt\(s\)", lines[1])
    assert lines[2] == ""  # the separator line before the exit handler's tree
    assert re.fullmatch(r" ✔ exit-handlers\.onExit +exit-handler", lines[3])
    # the three steps of group [0], started within one second: by name
    glyphs = [line[:6] for line in lines[4:]]
    assert glyphs == [" └─┬─○", "   ├─✔", "   └─✔"]
    assert lines[4].split()[1:] == ["celebrate", "celebrate", "when", "'Failed", "==",
                                    "Succeeded'", "evaluated", "false"]  # fmt: skip
    pod = pod_name("exit-handlers", "exit-handlers.onExit[0].cry", "cry")
    assert lines[5].split()[1:] == ["cry", "cry", pod, "0s"]
    # the columns line up: every cell of a column starts at one offset
    assert len({line.index("TEMPLATE") for line in lines[:1]} | {lines[3].index("exit-h", 5)}) == 1


def test_get_json_is_argos_workflow_with_the_nodes_the_controller_makes(example_runs, capsys):
    """``-o json``: only fields of Argo's Workflow, WorkflowStatus and NodeStatus (the
    v4.0.5 schema), node ids as the controller hashes names, ``children`` as dag.go and
    steps.go connect them, phases and times as state.json recorded them."""
    for run_dir in example_runs.values():
        code, out, _ = cli(capsys, "get", str(run_dir), "-o", "json")
        assert code == 0
        workflow = json.loads(out)
        check_argo_shape(workflow, load_state(run_dir))
        assert workflow["status"]["phase"] == load_state(run_dir)["globals"]["workflow.status"]

    def children(run: str) -> dict[str, list[str]]:
        """Each node's children, by node name less the workflow's."""
        workflow = json.loads(cli(capsys, "get", run, "-o", "json")[1])
        nodes, prefix = workflow["status"]["nodes"], workflow["metadata"]["name"]

        def key(node: dict) -> str:
            return node["name"].removeprefix(prefix).removeprefix(".") or prefix

        return {key(n): sorted(key(nodes[c]) for c in n["children"]) for n in nodes.values()}

    # loops-dag: A -> B (a TaskGroup holding its items) -> each item -> C
    loops = children(str(example_runs["loops-dag"]))
    assert loops["loops-dag"] == ["A"] and loops["A"] == ["B"]
    assert loops["B"] == ["B(0:foo)", "B(1:bar)", "B(2:baz)"]
    assert loops["B(0:foo)"] == loops["B(2:baz)"] == ["C"]
    # the disabled failFast DAG: C failed and nothing hangs under it; D under B, E under D
    dag = children(str(example_runs["fail-fast-off"]))
    assert dag["A"] == ["B", "C"] and dag["B"] == ["D"] and dag["D"] == ["E"]
    # steps: the root's StepGroup [0] holds the four loop items, each a steps node whose
    # own StepGroup holds its four items
    steps = children(str(example_runs["loops-nested"]))
    assert steps["loops-nested"] == ["[0]"]
    workers = [f"[0].parallel-worker({i}:{i + 1})" for i in range(4)]
    assert steps["[0]"] == workers
    assert steps[workers[0]] == [f"{workers[0]}[0]"]
    assert steps[f"{workers[0]}[0]"] == [
        f"{workers[0]}[0].seq-step({i}:{item})" for i, item in enumerate("abcd")
    ]
    assert all(
        steps[f"{workers[0]}[0].seq-step({i}:{item})"] == [] for i, item in enumerate("abcd")
    )


def test_list_prints_the_runs_as_argo_list(example_runs, capsys) -> None:
    runs_dir = next(iter(example_runs.values())).parent
    code, out, _ = cli(capsys, "list", "--runs-dir", str(runs_dir))
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["NAME", "STATUS", "AGE", "DURATION", "PRIORITY",
                                              "MESSAGE"]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == set(example_runs)
    assert rows["exit-handlers"][1:6] == ["Failed", rows["exit-handlers"][2], "0s", "0",
                                          "exited"]  # fmt: skip
    assert rows["loops-dag"][1] == "Succeeded" and rows["loops-dag"][4] == "0"
    # newest finish first (workflow_types.go Workflows.Less)
    names = [line.split()[0] for line in lines[1:]]
    finished = [
        json.loads(cli(capsys, "get", str(runs_dir / n), "-o", "json")[1])["status"]["finishedAt"]
        for n in names
    ]
    assert finished == sorted(finished, reverse=True)
    code, out, _ = cli(
        capsys, "list", "--runs-dir", str(runs_dir), "--status", "Failed", "-o", "name"
    )
    assert sorted(out.split()) == ["exit-handlers", "fail-fast-off"]
    code, out, _ = cli(capsys, "list", "--runs-dir", str(runs_dir), "--running")
    assert out == "No workflows found\n"
    code, out, err = cli(capsys, "list", "--runs-dir", str(runs_dir), "--running", "--completed")
    assert code == 2 and err == "cifar: error: --completed and --running cannot be used together\n"
    wide = cli(capsys, "list", "--runs-dir", str(runs_dir), "-o", "wide", "--prefix", "loops-n")[1]
    parameters = 'seq-list=["a","b","c","d"],parallel-list=[1,2,3,4]'  # values one line each
    assert wide.splitlines()[1].split()[5:] == ["0/0/16", parameters]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["get", "loops-dg"],
            "cifar: error: no run 'loops-dg' in {runs}/; the nearest: loops-dag, ",
        ),
        (
            ["logs", "exit-handler"],
            "cifar: error: no run 'exit-handler' in {runs}/; the nearest: exit-handlers, ",
        ),
        (["logs", "loops-dag", "D"], "cifar: error: run loops-dag has no task 'D'; the nearest: "),
    ],
)
def test_a_name_that_matches_nothing_names_the_nearest(example_runs, capsys, argv, message):
    runs_dir = next(iter(example_runs.values())).parent
    code, out, err = cli(capsys, *argv, "--runs-dir", str(runs_dir))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(message.format(runs=runs_dir)), err


def test_logs_prefix_each_line_with_its_task(example_runs, capsys) -> None:
    """argo logs: every pod's log, each line after its node's name; one task's alone."""
    run_dir = example_runs["fail-fast-off"]
    code, out, _ = cli(capsys, "logs", str(run_dir))
    lines = out.splitlines()
    assert code == 0 and {line.split(": ", 1)[0] for line in lines} == {"A", "B", "C", "D", "E"}
    # C failed after 1 + 3 attempts: its log has each attempt's line and output
    c = [line for line in lines if line.startswith("C: ")]
    attempts = [[f"C: --- attempt {i}: sh -c echo intentional failure; exit 2",
                 "C: intentional failure"] for i in range(1, 5)]  # fmt: skip
    assert c == [line for attempt in attempts for line in attempt]
    assert (run_dir / "logs" / "C.log").read_text().splitlines() == [x[3:] for x in c]
    code, out, _ = cli(capsys, "logs", str(run_dir), "C", "--tail", "1")
    assert out == "C: intentional failure\n"
    pod = pod_name("fail-fast-off", "fail-fast-off.E", "d")  # as argo get prints it
    assert (
        cli(capsys, "logs", str(run_dir), pod)[1]
        == "E: --- attempt 1: echo hello world\nE: hello world\n"
    )


def test_logs_follow_a_running_run_to_its_end(tmp_path: Path, capsys) -> None:
    """``logs -f`` prints what a task writes while it runs, and returns once the run
    ended, its last lines included; ``list --running`` shows it Running meanwhile."""
    script = "for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done"
    manifest = {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "slow"},
        "spec": {"entrypoint": "main", "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "a", "template": "t"}]}},
            {"name": "t", "container": {"image": "i:1", "command": ["sh", "-c", script]}},
        ]},
    }  # fmt: skip
    runner = LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "cache", cwd=tmp_path)
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        while not (runner.run_dir / "logs" / "a.log").is_file():
            time.sleep(0.05)
        out = cli(capsys, "list", "--running", "--runs-dir", str(tmp_path / "runs"))[1]
        assert out.splitlines()[1].split()[:2] == ["slow", "Running"], out
        seen: list[tuple[float, str]] = []
        print_logs(runner.run_dir, follow=True, poll_s=0.1,
                   write=lambda line: seen.append((time.monotonic(), line)))  # fmt: skip
    finally:
        thread.join(timeout=60)
    assert [line for _, line in seen][-5:] == [f"a: line {i}" for i in range(1, 6)]
    first, last = seen[-5][0], seen[-1][0]
    assert last - first > 1.0  # printed as written, not all at the end
    assert workflow_status(load_state(runner.run_dir))["status"]["phase"] == "Succeeded"


def test_get_yaml_is_the_json(example_runs, capsys) -> None:
    run = str(example_runs["loops-dag"])
    assert yaml.safe_load(cli(capsys, "get", run, "-o", "yaml")[1]) == json.loads(
        cli(capsys, "get", run, "-o", "json")[1]
    )
