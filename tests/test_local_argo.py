"""Issue #15 items 1-10: each workflow the local runner accepts ends as Argo ends it, and
the rest are refused in the constructor by name before any process starts. Small real
workflows (sh -c, python -c), no mocks."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from flows.local.errors import UnsupportedFeature
from flows.local.workflow import LocalRunner
from tests.helpers.local_examples import EXAMPLES, run, states


def container(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "container": {"image": "i:1", "command": ["sh", "-c", script]}, **extra}


def workflow(tasks: list[dict], templates: list[dict], **spec: Any) -> dict[str, Any]:
    dag = {"name": "main", "dag": {"tasks": tasks, **spec.pop("dag", {})}}
    dag.update(spec.pop("main", {}))
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {"entrypoint": "main", "templates": [dag, *templates], **spec},
    }


REFUSED = [
    (  # 1: a suspend template as a task (nested DAG and steps templates run: #15)
        workflow(
            [{"name": "a", "template": "ok"}, {"name": "inner", "template": "sub"}],
            [container("ok", "true"), {"name": "sub", "suspend": {}}],
        ),
        "template sub: suspend",
    ),
    (  # 6: no command
        workflow(
            [{"name": "a", "template": "t"}],
            [{"name": "t", "container": {"image": "alpine", "args": ["echo", "hi"]}}],
        ),
        "template t has no command: the image's entrypoint is not known on this machine",
    ),
    (  # 7: configMapKeyRef
        workflow(
            [{"name": "a", "template": "t"}],
            [
                container(
                    "t",
                    "echo {{inputs.parameters.p}}",
                    inputs={
                        "parameters": [
                            {
                                "name": "p",
                                "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}},
                            }
                        ]
                    },
                )
            ],
        ),
        "template t input p: valueFrom ['configMapKeyRef'] (not on this machine)",
    ),
    (  # 8: an input never supplied
        workflow(
            [{"name": "a", "template": "t"}],
            [
                container(
                    "t", "echo {{inputs.parameters.p}}", inputs={"parameters": [{"name": "p"}]}
                )
            ],
        ),
        "template main task a: input parameter p is never given",
    ),
    (  # 8: an entrypoint naming no template
        {**workflow([], []), "spec": {**workflow([], [])["spec"], "entrypoint": "nope"}},
        "spec.entrypoint 'nope' names no template",
    ),
    (  # 9: failFast outside a dag
        workflow([{"name": "a", "template": "t"}], [container("t", "true", failFast=False)]),
        "template t: failFast",
    ),
]


@pytest.mark.parametrize(("manifest", "message"), REFUSED)
def test_refused_by_name_before_anything_starts(tmp_path: Path, manifest, message) -> None:
    with pytest.raises(UnsupportedFeature, match="does not implement") as refused:
        LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "cache")
    assert message in str(refused.value)
    assert not (tmp_path / "runs").exists()  # nothing started, no run directory


def test_fail_fast_false_runs_independent_branches_to_the_end(tmp_path: Path) -> None:
    # Argo's examples/dag-disable-failFast.yaml: B fails, C (independent, slower) still runs
    # and D (after C) too; E after B is Omitted; the workflow Failed.
    tasks = [
        {"name": "A", "template": "ok"},
        {"name": "B", "template": "fail", "depends": "A"},
        {"name": "C", "template": "slow", "depends": "A"},
        {"name": "D", "template": "ok", "depends": "C"},
        {"name": "E", "template": "ok", "depends": "B"},
    ]
    templates = [container("ok", "true"), container("fail", "exit 1"), container("slow", "sleep 1")]
    _, result = run(tmp_path, workflow(tasks, templates, dag={"failFast": False}))
    assert result.status == "Failed"
    assert states(result) == {
        "A": "Succeeded", "B": "Failed", "C": "Succeeded", "D": "Succeeded", "E": "Omitted",
    }  # fmt: skip


def test_fail_fast_default_still_runs_a_task_whose_dependencies_are_met(tmp_path: Path) -> None:
    """dag.failFast (true by default) judges the DAG, it does not Omit: when C ends, Argo's
    executeDAG runs every task whose dependencies are met (executeDAGTask, here D) before
    assessDAGPhase fails the DAG on B (argo-workflows v4.0.5 workflow/controller/dag.go);
    only the template's own failFast stops new starts (operator.go checkParallelism)."""
    tasks = [
        {"name": "B", "template": "fail"},
        {"name": "C", "template": "slow"},
        {"name": "D", "template": "ok", "depends": "C"},
    ]
    templates = [container("ok", "true"), container("fail", "exit 1"), container("slow", "sleep 1")]
    _, result = run(tmp_path, workflow(tasks, templates))
    assert states(result) == {"B": "Failed", "C": "Succeeded", "D": "Succeeded"}
    assert result.status == "Failed"


def test_the_templates_own_fail_fast_starts_nothing_after_a_failure(tmp_path: Path) -> None:
    """The DAG template's ``failFast: true`` (not dag.failFast): no child starts once one
    failed, and the DAG fails with Argo's message (operator.go checkParallelism)."""
    tasks = [
        {"name": "B", "template": "fail"},
        {"name": "C", "template": "slow"},
        {"name": "D", "template": "ok", "depends": "C"},
    ]
    templates = [container("ok", "true"), container("fail", "exit 1"), container("slow", "sleep 1")]
    runner, result = run(tmp_path, workflow(tasks, templates, main={"failFast": True}))
    assert states(result) == {"B": "Failed", "C": "Succeeded", "D": "Omitted"}
    assert runner.root.message == "template has failed or errored children and failFast enabled"


def test_a_failed_exit_handler_fails_the_workflow(tmp_path: Path) -> None:
    manifest = workflow(
        [{"name": "a", "template": "ok"}],
        [container("ok", "true"), container("bye", "exit 3")],
        onExit="bye",
    )
    runner, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert runner.exit_task.state.value == "Failed" and runner.exit_task.exit_code == 3
    state = json.loads((result.run_dir / "state.json").read_text())
    assert state["globals"]["workflow.status"] == "Failed"


def test_empty_retry_strategy_retries_until_it_succeeds(tmp_path: Path) -> None:
    # fails on the first 3 attempts, then succeeds: Argo's retryStrategy {} has no limit
    script = (
        f"n=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((n+1)) > {tmp_path}/n; [ $n -ge 3 ]"
    )
    manifest = workflow(
        [{"name": "a", "template": "t"}], [container("t", script, retryStrategy={})]
    )
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert result.tasks["a"].attempts == 4


@pytest.mark.parametrize(
    ("policy", "attempts"),
    [("Always", 3), ("OnFailure", 3), ("OnError", 1), ("OnTransientError", 1)],
)
def test_retry_policy_decides_whether_a_failed_exit_is_retried(
    tmp_path: Path, policy: str, attempts: int
) -> None:
    retry = {"limit": 2, "retryPolicy": policy}
    manifest = workflow(
        [{"name": "a", "template": "t"}], [container("t", "exit 1", retryStrategy=retry)]
    )
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert result.tasks["a"].attempts == attempts


def test_an_output_file_in_a_directory_of_its_own_is_written(tmp_path: Path) -> None:
    # Argo's examples/memoize-simple.yaml writes /tmp/hello_world.txt
    outputs = {"parameters": [{"name": "hello", "valueFrom": {"path": "/tmp/hello_world.txt"}}]}
    manifest = workflow(
        [{"name": "a", "template": "t"}],
        [container("t", "echo hi > /tmp/hello_world.txt", outputs=outputs)],
    )
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded", result.tasks["a"].tail
    assert result.tasks["a"].outputs == {"hello": "hi"}


def test_workflow_active_deadline_fails_the_running_task_and_runs_the_exit_handler(
    tmp_path: Path,
) -> None:
    manifest = workflow(
        [
            {"name": "slow", "template": "slow"},
            {"name": "next", "template": "ok", "depends": "slow"},
        ],
        [
            container("slow", "sleep 30"),
            container("ok", "true"),
            container("bye", f"echo {{{{workflow.status}}}} > {tmp_path}/status"),
        ],
        activeDeadlineSeconds=1,
        onExit="bye",
    )
    begun = time.monotonic()
    _, result = run(tmp_path, manifest)
    assert time.monotonic() - begun < 20
    assert result.status == "Failed"
    assert states(result) == {"slow": "Failed", "next": "Omitted"}
    assert result.tasks["slow"].message == "Step exceeded its deadline"
    assert (tmp_path / "status").read_text().strip() == "Failed"


@pytest.mark.parametrize("where", ["spec", "main"])
def test_parallelism_limits_the_tasks_running_at_once(tmp_path: Path, where: str) -> None:
    log = tmp_path / "log"
    script = f"echo start >> {log}; sleep 0.3; echo end >> {log}"
    tasks = [{"name": f"t{i}", "template": "t"} for i in range(4)]
    limit = {"parallelism": 1} if where == "spec" else {"main": {"parallelism": 1}}
    _, result = run(tmp_path, workflow(tasks, [container("t", script)], **limit))
    assert result.status == "Succeeded"
    assert log.read_text().split() == ["start", "end"] * 4  # never two at once


def test_a_memo_hit_whose_files_are_gone_runs_the_task_again(tmp_path: Path) -> None:
    data = tmp_path / "artifacts" / "data"
    outputs = {"parameters": [{"name": "uri", "valueFrom": {"path": "/tmp/out/uri"}}]}
    memoize = {"key": "stage-1", "cache": {"configMap": {"name": "memo"}}}
    script = f"mkdir -p {data} && echo run >> {tmp_path}/runs.log"
    script += f" && echo -n file://{data} > /tmp/out/uri"
    manifest = workflow(
        [{"name": "stage", "template": "t"}],
        [container("t", script, outputs=outputs, memoize=memoize)],
    )
    for expected in ("Succeeded", "Cached"):
        manifest["metadata"]["name"] = f"wf-{expected.lower()}"
        _, result = run(tmp_path, manifest)
        assert result.tasks["stage"].state.value == expected
    data.rmdir()  # the user removed the dataset: Argo would reuse the entry; here it runs again
    manifest["metadata"]["name"] = "wf-again"
    _, result = run(tmp_path, manifest)
    assert result.tasks["stage"].state.value == "Succeeded"
    assert (tmp_path / "runs.log").read_text().split() == ["run", "run"]


def test_argo_example_dag_disable_fail_fast(tmp_path: Path) -> None:
    """Argo ends it Failed: C fails after 1 + 3 attempts with exit 2, while B, D and E run
    to the end. B's sleep shortened from 30 s to 4 s: C's four attempts end within a
    second here, so B still runs on after C failed (asserted)."""
    import yaml

    manifest = yaml.safe_load((EXAMPLES / "dag-disable-failFast.yaml").read_text())
    (b,) = [t for t in manifest["spec"]["templates"] if t["name"] == "b"]
    assert b["container"]["args"] == ["sleep 30; echo haha"]
    b["container"]["args"] = ["sleep 4; echo haha"]
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert states(result) == {
        "A": "Succeeded", "B": "Succeeded", "C": "Failed", "D": "Succeeded", "E": "Succeeded",
    }  # fmt: skip
    assert (result.tasks["C"].attempts, result.tasks["C"].exit_code) == (4, 2)
    assert result.tasks["B"].attempts == 1
    assert result.tasks["C"].finished < result.tasks["B"].finished  # failFast: false held


def test_exit_handler_sees_duration_and_failures(tmp_path: Path) -> None:
    report = (
        f"echo {{{{workflow.duration}}}} > {tmp_path}/duration; "
        f"cat > {tmp_path}/failures <<'END'\n{{{{workflow.failures}}}}\nEND\n"
    )
    manifest = workflow(
        [{"name": "bad", "template": "bad"}],
        [container("bad", "sleep 0.2; exit 4"), container("bye", report)],
        onExit="bye",
    )
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert float((tmp_path / "duration").read_text()) >= 0.2
    # Argo v4.0.5 (workflow/controller/operator.go) json.Marshals the failed nodes, then
    # strconv.Quotes them: the exit handler reads a JSON string holding compact JSON.
    text = (tmp_path / "failures").read_text().strip()
    assert text.startswith('"[{\\"displayName\\":\\"bad\\",\\"message\\":\\"exited')
    (failure,) = json.loads(json.loads(text))
    assert list(failure) == [
        "displayName",
        "message",
        "templateName",
        "phase",
        "podName",
        "finishedAt",
    ]  # failedNodeStatus's field order
    assert failure["displayName"] == "bad" and failure["phase"] == "Failed"
    assert failure["message"] == "exited with code 4 after 1 attempt(s)"
    assert failure["finishedAt"].endswith("Z")


def test_a_workflow_that_succeeds_has_failures_null_quoted(tmp_path: Path) -> None:
    """A nil list marshals to ``null``, quoted as ``"null"`` (operator.go)."""
    report = f"cat > {tmp_path}/failures <<'END'\n{{{{workflow.failures}}}}\nEND\n"
    manifest = workflow(
        [{"name": "ok", "template": "ok"}],
        [container("ok", "true"), container("bye", report)],
        onExit="bye",
    )
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert (tmp_path / "failures").read_text().strip() == '"null"'
