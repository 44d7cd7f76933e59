"""What the merge of the loops and expressions work lets the local runner run: ``when`` on
steps and looping tasks, enhanced ``depends`` in any DAG, ``{{=...}}`` anywhere. Argo's own
examples (tests/argo_examples/) end as Argo ends them; random ones are made deterministic
by a fixed choice, as said at each."""

from __future__ import annotations

from pathlib import Path

from tests.test_local_steps import example, run, states


def test_dag_continue_on_fail_runs_what_expects_the_failure(tmp_path: Path) -> None:
    """examples/dag-continue-on-fail.yaml (no-test: expected-failure): D runs on B.Failed,
    G is Omitted below the failed E, and that branch fails the workflow."""
    _, result = run(tmp_path, example("dag-continue-on-fail"))
    assert result.status == "Failed"
    assert states(result) == {
        "A": "Succeeded", "B": "Failed", "C": "Succeeded", "D": "Succeeded",
        "E": "Failed", "F": "Succeeded", "G": "Omitted",
    }  # fmt: skip


def test_parameter_aggregation_script_skips_the_odd_items(tmp_path: Path) -> None:
    """examples/parameter-aggregation-script.yaml: ``when`` per item of a withParam loop."""
    _, result = run(tmp_path, example("parameter-aggregation-script"))
    assert result.status == "Succeeded"
    divided = {k: n for k, n in result.tasks.items() if k.startswith("[1].")}
    assert {k: n.state.value for k, n in divided.items()} == {
        "[1].divide-by-2(0:evenness:odd,num:1)": "Skipped",
        "[1].divide-by-2(1:evenness:even,num:2)": "Succeeded",
        "[1].divide-by-2(2:evenness:odd,num:3)": "Skipped",
        "[1].divide-by-2(3:evenness:even,num:4)": "Succeeded",
    }
    assert [n.result for n in divided.values() if n.result] == ["1", "2"]
    assert divided["[1].divide-by-2(0:evenness:odd,num:1)"].kind == "Skipped"
