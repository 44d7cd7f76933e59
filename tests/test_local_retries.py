"""The local runner's retries as Argo's: the retry backoff example's waits capped, maxDuration
ending the retries, a resumed run running again only the items that failed, a steps
template's failFast, the exit code output, the retries variable; a finished loop kept on
resume."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flows.local.errors import UnsupportedFeature
from flows.local.status import TaskState, file_name
from flows.local.workflow import LocalRunner
from tests.helpers.local_examples import example, run, states
from tests.helpers.loop_workflows import dag_workflow, sh


# --- retry backoff ------------------------------------------------------------------------------
def test_retry_backoff_example_waits_are_capped(tmp_path: Path) -> None:
    """Argo's retry-backoff.yaml (duration 1, factor 2, cap 5, limit 10), its random exit
    replaced by ``exit 1``: 11 attempts, waits 1, 2, 4, then 5 each."""
    manifest = example("retry-backoff")
    manifest["spec"]["templates"][0]["container"] = {"image": "i:1", "command": ["false"]}
    waits: list[float] = []
    runner, result = run(tmp_path, manifest, sleep=waits.append)
    assert result.status == "Failed"
    assert result.tasks[runner.name].attempts == 11
    assert waits == [1, 2, 4, 5, 5, 5, 5, 5, 5, 5]


@pytest.mark.parametrize(
    ("script", "backoff", "attempts", "message"),
    [
        ("exit 1", {"duration": "1", "factor": "2", "maxDuration": "2"}, 2,
         "Backoff would exceed max duration limit"),  # waits 1, then 2 would end at ~3 s
        ("sleep 1.2; exit 1", {"duration": "1", "maxDuration": "1"}, 1,
         "Max duration limit exceeded"),
    ],
)  # fmt: skip
def test_max_duration_ends_the_retries(
    tmp_path: Path, script: str, backoff: dict, attempts: int, message: str
) -> None:
    retry = {"limit": 10, "backoff": backoff}
    manifest = dag_workflow(
        [{"name": "t", "template": "t"}], [sh("t", script, retryStrategy=retry)]
    )
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert (result.tasks["t"].attempts, result.tasks["t"].message) == (attempts, message)


def test_max_duration_stops_a_retry_that_runs_past_it(tmp_path: Path) -> None:
    marker = tmp_path / "tried"
    script = f"if [ -e {marker} ]; then sleep 30; fi; touch {marker}; exit 1"
    retry = {"limit": 3, "backoff": {"duration": "0", "maxDuration": "2s"}}
    manifest = dag_workflow(
        [{"name": "t", "template": "t"}], [sh("t", script, retryStrategy=retry)]
    )
    begun = time.monotonic()
    _, result = run(tmp_path, manifest)
    assert time.monotonic() - begun < 12  # the second attempt is stopped at ~2 s, not 30
    assert result.status == "Failed"
    assert result.tasks["t"].attempts == 2


def test_resume_runs_again_only_the_items_that_failed(tmp_path: Path) -> None:
    flag = tmp_path / "fixed"
    n = "{{inputs.parameters.n}}"
    script = f"echo {n} >> {tmp_path}/ran; [ {n} != 1 ] || test -e {flag}"
    tasks = [{"name": "loop", "template": "t", "withItems": [0, 1, 2],
              "arguments": {"parameters": [{"name": "n", "value": "{{item}}"}]}}]  # fmt: skip
    runner, result = run(tmp_path, dag_workflow(tasks, [sh("t", script, "n")]))
    assert result.status == "Failed"
    assert result.tasks["loop(1:1)"].state is TaskState.FAILED
    flag.touch()
    resumed = LocalRunner.resume(runner.run_dir, cache_dir=tmp_path / "cache", cwd=tmp_path)
    again = resumed.run()
    assert again.status == "Succeeded"
    assert states(again) == {
        "loop": "Succeeded", "loop(0:0)": "Succeeded", "loop(1:1)": "Succeeded",
        "loop(2:2)": "Succeeded",
    }  # fmt: skip
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1", "1", "2"]


def test_a_steps_template_fail_fast_starts_no_item_after_a_failure(tmp_path: Path) -> None:
    """Argo's loops-arbitrary-sequential-steps.yaml: parallelism 1 and failFast; the 4th
    item exits 1, the last two never start, the workflow fails."""
    runner, result = run(tmp_path, example("loops-arbitrary-sequential-steps"))
    assert result.status == "Failed"
    assert [(n.state.value, n.result) for n in result.tasks.values()] == [
        ("Succeeded", "succeeds 1"), ("Succeeded", "succeeds 2"), ("Succeeded", "succeeds 3"),
        ("Failed", "will fail and stop here"), ("Omitted", None), ("Omitted", None),
    ]  # fmt: skip
    assert runner.root.message == "template has failed or errored children and failFast enabled"


def test_exit_code_output_variable_example_passes_the_exit_code_on(tmp_path: Path) -> None:
    _, result = run(tmp_path, example("exit-code-output-variable"))
    assert result.status == "Succeeded"
    assert states(result) == {"[0].failing-container": "Failed", "[1].echo-container": "Succeeded"}
    assert result.tasks["[1].echo-container"].result == "Exit code was: 123"


def test_retries_counts_the_attempts_of_each_step(tmp_path: Path) -> None:
    """Argo's retry-with-steps.yaml with its random exit replaced by one that fails the first
    two attempts: each step prints ``retries: 0``, ``1``, ``2`` and succeeds on the third."""
    manifest = example("retry-with-steps")
    container = manifest["spec"]["templates"][1]["container"]
    container["args"] = [
        "import sys; print('retries: {{retries}}', '{{lastRetry.exitCode}}'); "
        "sys.exit(0 if {{retries}} >= 2 else 7)"
    ]
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    for step in ("[0].hello1", "[1].hello2a", "[1].hello2b"):
        assert result.tasks[step].attempts == 3
        assert result.tasks[step].result == "retries: 2 7"
        log = result.run_dir / "logs" / f"{file_name(step)}.log"
        assert [line for line in log.read_text().splitlines() if line.startswith("retries")] == [
            "retries: 0 0", "retries: 1 7", "retries: 2 7",
        ]  # fmt: skip


def test_retries_without_a_retry_strategy_is_refused(tmp_path: Path) -> None:
    manifest = dag_workflow([{"name": "t", "template": "t"}], [sh("t", "echo {{retries}}")])
    with pytest.raises(UnsupportedFeature, match=r"template t: \{\{retries\}\} without a retry"):
        LocalRunner(manifest, tmp_path / "runs")


def test_resume_keeps_a_finished_loop_of_nested_dags_and_its_aggregate(tmp_path: Path) -> None:
    flag, n = tmp_path / "fixed", "{{inputs.parameters.n}}"
    inner = {
        "name": "inner",
        "inputs": {"parameters": [{"name": "n"}]},
        "dag": {"tasks": [{"name": "make", "template": "make", "arguments": {
            "parameters": [{"name": "n", "value": "{{inputs.parameters.n}}"}]}}]},
        "outputs": {"parameters": [{"name": "v", "valueFrom": {
            "parameter": "{{tasks.make.outputs.result}}"}}]},
    }  # fmt: skip
    tasks = [
        {"name": "loop", "template": "inner", "withItems": ["a", "b"],
         "arguments": {"parameters": [{"name": "n", "value": "{{item}}"}]}},
        {"name": "after", "template": "after", "depends": "loop", "arguments": {
            "parameters": [{"name": "vs", "value": "{{tasks.loop.outputs.parameters.v}}"}]}},
    ]  # fmt: skip
    templates = [
        inner,
        sh("make", f"echo {n} >> {tmp_path}/made; echo v-{n}", "n"),
        sh("after", f"test -e {flag} && echo '{{{{inputs.parameters.vs}}}}'", "vs"),
    ]
    runner, result = run(tmp_path, dag_workflow(tasks, templates))
    assert result.status == "Failed"
    assert result.tasks["loop(0:a).make"].result == "v-a"
    flag.touch()
    again = LocalRunner.resume(runner.run_dir, cache_dir=tmp_path / "cache", cwd=tmp_path).run()
    assert again.status == "Succeeded"
    assert again.tasks["after"].result == '["v-a","v-b"]'
    assert sorted((tmp_path / "made").read_text().split()) == ["a", "b"]  # not made again
