"""What the merge of the loops and expressions work lets the local runner run: ``when`` on
steps and looping tasks, enhanced ``depends`` in any DAG, ``{{=...}}`` anywhere. Argo's own
examples (tests/argo_examples/) end as Argo ends them; random ones are made deterministic
by a fixed choice, as said at each."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.pods.processes import SubprocessHandler
from flows.local.substitution import substitute
from flows.local.workflow import LocalRunner
from tests.helpers.local_examples import example, run, sh, states, steps_workflow


def test_dag_continue_on_fail_runs_what_expects_the_failure(tmp_path: Path) -> None:
    """examples/dag-continue-on-fail.yaml (no-test: expected-failure): D runs on B.Failed,
    G is Omitted below the failed E, and that branch fails the workflow. E fails 0.5 s later
    here, so B and C have ended by then, as all four end in one of Argo's passes (the
    other order, G Omitted first: the test below)."""
    manifest = example("dag-continue-on-fail")
    slow_fail = {**manifest["spec"]["templates"][2], "name": "slow-fail"}
    slow_fail["container"] = {**slow_fail["container"], "args": ["sleep 0.5; exit 1"]}
    manifest["spec"]["templates"].append(slow_fail)
    manifest["spec"]["templates"][0]["dag"]["tasks"][4]["template"] = "slow-fail"
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    assert states(result) == {
        "A": "Succeeded", "B": "Failed", "C": "Succeeded", "D": "Succeeded",
        "E": "Failed", "F": "Succeeded", "G": "Omitted",
    }  # fmt: skip


class HeldUntil:
    """A task handler that holds the processes of ``held`` nodes until node ``until`` is
    decided, so a DAG's nodes end in a chosen order: the real processes, run by the
    runner's own handler, in a deterministic interleaving."""

    def __init__(self, held: set[str], until: str) -> None:
        self.inner, self.held, self.until = SubprocessHandler(), held, until
        self.tasks: dict = {}  # the runner's nodes, set once it is built

    def run(self, spec, log: Path, tail) -> int:
        if log.stem in self.held:
            deadline = time.monotonic() + 60
            while not self._decided() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert self._decided(), f"{self.until} never decided"
        return self.inner.run(spec, log, tail)

    def _decided(self) -> bool:
        node = self.tasks.get(self.until)
        return node is not None and node.state.done

    def interrupt(self) -> None:
        self.inner.interrupt()

    def reset(self) -> None:
        self.inner.reset()

    def start_service(self, spec, sink):
        return self.inner.start_service(spec, sink)


def test_dag_continue_on_fail_runs_d_even_when_g_was_omitted_first(tmp_path: Path) -> None:
    """examples/dag-continue-on-fail.yaml as published, B and C ending only after E failed
    and G was Omitted below it: D's dependencies are met (B.Failed && C) once they end,
    and Argo's executeDAG runs every task whose dependencies are met (executeDAGTask over
    the target tasks) before assessDAGPhase applies failFast (argo-workflows v4.0.5
    workflow/controller/dag.go executeDAG), so D runs; G's failed branch fails the
    workflow after it."""
    handler = HeldUntil({"B", "C"}, until="G")
    runner = LocalRunner(
        example("dag-continue-on-fail"),
        tmp_path / "runs",
        cache_dir=tmp_path / "cache",
        cwd=tmp_path,
        handler=handler,
    )
    handler.tasks = runner.tasks
    result = runner.run()
    assert result.tasks["G"].finished <= result.tasks["B"].finished
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


def fixed_flip(manifest: dict, side: str, template: str = "flip-coin") -> dict:
    """The coin's template prints ``side``: Argo's random flip made deterministic."""
    for t in manifest["spec"]["templates"]:
        if t["name"] == template:
            t["script"]["source"] = f"print({side!r})\n"
    return manifest


@pytest.mark.parametrize(("side", "other"), [("heads", "tails"), ("tails", "heads")])
def test_coinflip_runs_the_side_that_came_up(tmp_path: Path, side: str, other: str) -> None:
    """examples/coinflip.yaml: ``when`` on steps over the previous step's result."""
    _, result = run(tmp_path, fixed_flip(example("coinflip"), side))
    assert result.status == "Succeeded"
    assert states(result) == {
        "[0].flip-coin": "Succeeded", f"[1].{side}": "Succeeded", f"[1].{other}": "Skipped",
    }  # fmt: skip
    assert result.tasks[f"[1].{side}"].result == f"it was {side}"
    assert result.tasks[f"[1].{other}"].message == f"when '{side} == {other}' evaluated false"


@pytest.mark.parametrize("name", ["conditional-parameters", "dag-conditional-parameters"])
@pytest.mark.parametrize("side", ["heads", "tails"])
def test_conditional_parameters_take_the_output_of_the_step_that_ran(
    tmp_path: Path, name: str, side: str
) -> None:
    """examples/(dag-)conditional-parameters.yaml: a steps or DAG template's output from
    ``valueFrom.expression`` over its children, one of them Skipped."""
    runner, result = run(tmp_path, fixed_flip(example(name), side))
    assert result.status == "Succeeded"
    assert runner.root.outputs == {"stepresult": side}
    skipped = [k for k, n in result.tasks.items() if n.state.value == "Skipped"]
    assert len(skipped) == 1 and skipped[0].endswith("heads" if side == "tails" else "tails")


def test_exit_handlers_run_as_steps_with_when_on_the_workflow_status(tmp_path: Path) -> None:
    """examples/exit-handlers.yaml (no-test: expected-failure): the entrypoint fails; the
    exit handler's steps notify and cry run, celebrate is Skipped."""
    runner, result = run(tmp_path, example("exit-handlers"))
    assert result.status == "Failed"
    assert result.tasks[runner.name].state.value == "Failed"
    handler = {k: n.state.value for k, n in result.tasks.items() if k.startswith("onExit")}
    assert handler == {
        "onExit[0].notify": "Succeeded", "onExit[0].celebrate": "Skipped",
        "onExit[0].cry": "Succeeded",
    }  # fmt: skip
    assert runner.exit_task is not None and runner.exit_task.state.value == "Succeeded"
    assert result.tasks["onExit[0].cry"].result == "boohoo!"
    assert f"send e-mail: {runner.name} Failed" in result.tasks["onExit[0].notify"].result


def test_parameter_aggregation_divides_the_even_numbers(tmp_path: Path) -> None:
    """examples/parameter-aggregation.yaml: a loop over aggregated output parameters with
    ``when`` per item, then a loop over the results of the items that ran."""
    _, result = run(tmp_path, example("parameter-aggregation"))
    assert result.status == "Succeeded"
    # Argo's aggregatedJSONValueList: values that are no JSON map or list stay strings
    assert result.tasks["[1].print-nums"].result == '["1","2","3","4"]'
    assert result.tasks["[2].print-evenness"].result == '["odd","even","odd","even"]'
    divided = {k: n.state.value for k, n in result.tasks.items() if k.startswith("[3].")}
    assert sorted(divided.values()) == ["Skipped", "Skipped", "Succeeded", "Succeeded"]
    printed = {k: n.result for k, n in result.tasks.items() if k.startswith("[4].")}
    assert printed == {"[4].print(0:1)": "1", "[4].print(1:2)": "2"}


RETRY_SOURCE = """import pathlib, sys
tries = pathlib.Path("tries")
n = len(tries.read_text()) if tries.exists() else 0
tries.write_text("x" * (n + 1))
sys.exit(2 if n < 2 else 1)
"""


def test_retry_conditional_retries_while_its_expression_holds(tmp_path: Path) -> None:
    """examples/retry-conditional.yaml, made deterministic: exit 2, 2, then 1. The
    expression (``asInt(lastRetry.exitCode) > 1 && ...``) allows a retry after each 2 and
    none after the 1, well before ``limit: 10``."""
    manifest = example("retry-conditional")
    manifest["spec"]["templates"][2]["script"]["source"] = RETRY_SOURCE
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"
    node = result.tasks["[1].retry"]
    assert (node.state.value, node.attempts, node.exit_code) == ("Failed", 3, 1)
    assert node.message == "retryStrategy.expression evaluated to false"


def test_retry_expression_that_fails_to_evaluate_is_an_error(tmp_path: Path) -> None:
    manifest = example("retry-conditional")
    manifest["spec"]["templates"][2]["script"]["source"] = RETRY_SOURCE
    manifest["spec"]["templates"][2]["retryStrategy"]["expression"] = "asInt(lastRetry.message)"
    _, result = run(tmp_path, manifest)
    assert result.status == "Failed"  # the steps template fails on its Error child
    node = result.tasks["[1].retry"]
    assert (node.state.value, node.attempts) == ("Error", 1)
    assert "retryStrategy.expression" in node.message and "int(" in node.message


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("retry", "template retry-script.retryStrategy.expression 'nope(lastRetry.exitCode)': "),
        ("output", "template main output stepresult 'steps[': syntax"),
        ("pod-output", "template heads output x: valueFrom ['expression']"),
    ],
)
def test_an_expression_field_that_cannot_run_is_refused_by_name(
    tmp_path: Path, where: str, message: str
) -> None:
    if where == "retry":
        manifest = example("retry-conditional")
        manifest["spec"]["templates"][2]["retryStrategy"]["expression"] = "nope(lastRetry.exitCode)"
    else:
        manifest = example("conditional-parameters")
        templates = manifest["spec"]["templates"]
        if where == "output":
            templates[0]["outputs"]["parameters"][0]["valueFrom"]["expression"] = "steps["
        else:  # a pod's outputs come from its files
            templates[2]["outputs"] = {
                "parameters": [{"name": "x", "valueFrom": {"expression": "1"}}]
            }
    with pytest.raises(UnsupportedFeature, match="does not implement") as refused:
        LocalRunner(manifest, tmp_path / "runs")
    assert message in str(refused.value)
    assert not (tmp_path / "runs").exists()


def test_a_nested_dag_decides_by_enhanced_depends_over_a_loop(tmp_path: Path) -> None:
    """A DAG run as a step: a loop with one failing item (continueOn), ``.AnySucceeded`` /
    ``.AllFailed`` over its items, a ``when`` with an expression tag, and a Skipped task's
    output default passed on."""
    inner = {
        "name": "inner",
        "dag": {
            "tasks": [
                {"name": "loop", "template": "maybe", "withItems": [0, 1, 2],
                 "arguments": {"parameters": [{"name": "n", "value": "{{item}}"}]},
                 "continueOn": {"failed": True}},
                {"name": "any", "template": "ok", "depends": "loop.AnySucceeded"},
                {"name": "all", "template": "ok", "depends": "loop.AllFailed || !any"},
                {"name": "skip", "template": "out", "when": "{{=asInt('2') > 3}}"},
                {"name": "after", "template": "echo", "depends": "skip.Skipped && any",
                 "arguments": {"parameters": [
                     {"name": "m", "value": "{{tasks.skip.outputs.parameters.o}}"}]}},
            ]
        },
    }  # fmt: skip
    templates = [
        inner,
        sh("maybe", '[ "{{inputs.parameters.n}}" != 1 ]',
           inputs={"parameters": [{"name": "n"}]}),
        sh("ok", "true"),
        sh("echo", "echo got {{inputs.parameters.m}}", inputs={"parameters": [{"name": "m"}]}),
        sh("out", "echo x > /tmp/o", outputs={"parameters": [
            {"name": "o", "valueFrom": {"path": "/tmp/o", "default": "dflt"}}]}),
    ]  # fmt: skip
    manifest = steps_workflow([[{"name": "d", "template": "inner"}]], templates)
    _, result = run(tmp_path, manifest)
    got = states(result)
    assert got["[0].d.loop"] == "Failed"  # the TaskGroup takes its failed item's phase
    assert [got[f"[0].d.loop({i}:{i})"] for i in range(3)] == ["Succeeded", "Failed", "Succeeded"]
    assert (got["[0].d.any"], got["[0].d.all"]) == ("Succeeded", "Omitted")
    assert (got["[0].d.skip"], got["[0].d.after"]) == ("Skipped", "Succeeded")
    assert result.tasks["[0].d.after"].result == "got dflt"
    # all is an Omitted leaf below the failed loop: Argo's assessDAGPhase fails the DAG
    assert (got["[0].d"], result.status) == ("Failed", "Failed")


def test_expression_reusing_verbose_snippets_in_a_script_entrypoint(tmp_path: Path) -> None:
    """examples/expression-reusing-verbose-snippets.yaml: {{=...}} in a script entrypoint's
    input value and env (map with #, jsonpath, sprig.b64dec / add / min / max)."""
    runner, result = run(tmp_path, example("expression-reusing-verbose-snippets"))
    assert result.status == "Succeeded"
    assert result.tasks[runner.name].result == (
        "The week's average temperature was 35.8 with a minimum of 15 and a maximum of 57."
    )


def test_expression_tag_template_workflow_is_refused_by_its_sprig_date(tmp_path: Path) -> None:
    """examples/expression-tag-template-workflow.yaml: {{=item}} and a withParam from an
    expression run, but sprig.date is not implemented: refused by name before the run."""
    with pytest.raises(UnsupportedFeature, match=r"sprig\.date\(\) is not implemented"):
        LocalRunner(example("expression-tag-template-workflow"), tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_expressions_in_a_loop_and_its_items(tmp_path: Path) -> None:
    """{{=...}} in withParam and in an item's argument (the loop part of Argo's
    expression-tag-template-workflow example)."""
    task = {
        "name": "t", "template": "echo", "withParam": "{{=toJson(filter([1, 3, 5], {# > 1}))}}",
        "arguments": {"parameters": [{"name": "m", "value": "{{=asInt(item) * 10}}"}]},
    }  # fmt: skip
    templates = [sh("echo", "echo {{inputs.parameters.m}}", inputs={"parameters": [{"name": "m"}]})]
    manifest = steps_workflow([[task]], templates)
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert {k: n.result for k, n in result.tasks.items()} == {
        "[0].t(0:3)": "30", "[0].t(1:5)": "50",
    }  # fmt: skip


FIRST_TAILS = """import os
try:  # the first flip creates the marker, atomically: B's and C's flips run side by side
    os.close(os.open("flipped", os.O_CREAT | os.O_EXCL))
    print("tails")
except FileExistsError:
    print("heads")
"""


def test_dag_coinflip_recurses_on_tails(tmp_path: Path) -> None:
    """examples/dag-coinflip.yaml, made deterministic: the first flip (A's) is tails, every
    later one heads; tails runs the steps template again inside itself."""
    manifest = fixed_flip(example("dag-coinflip"), "heads")
    manifest["spec"]["templates"][2]["script"]["source"] = FIRST_TAILS
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    got = states(result)
    assert [got[t] for t in "ABCD"] == ["Succeeded"] * 4
    assert (got["A[1].heads"], got["A[1].tails"]) == ("Skipped", "Succeeded")
    assert result.tasks["A[1].tails"].kind == "Steps"
    assert result.tasks["A[1].tails[1].heads"].result == "it was heads"
    assert got["A[1].tails[1].tails"] == "Skipped"
    for task in "BCD":
        assert (got[f"{task}[1].heads"], got[f"{task}[1].tails"]) == ("Succeeded", "Skipped")


@pytest.mark.parametrize(("should_print", "phase"), [("true", "Succeeded"), ("false", "Skipped")])
def test_conditionals_reads_the_parameters_as_json(
    tmp_path: Path, should_print: str, phase: str
) -> None:
    """examples/conditionals.yaml: the govaluate ``when``, the expr one and the one over
    ``jsonpath(workflow.parameters.json, '$[0].value')`` agree (Argo's e2e
    test/e2e/functional_test.go TestWhenExpressions runs it and expects no step Skipped).
    ``workflow.parameters.json`` is all the workflow's arguments as JSON, set among the
    globals by argo-workflows v4.0.5 workflow/controller/operator.go; without it the tag had
    a variable out of scope, which Argo leaves unresolved in a global substitution
    (util/template/expression_template.go ``expressionReplaceStrict``, ``allowUnresolved``)
    rather than failing on it. The argosay steps' ``cowsay hello`` is ``echo`` here."""
    manifest = example("conditionals")
    for template in manifest["spec"]["templates"]:
        if "container" in template:
            template["container"]["args"] = ["echo hello"]
    runner, result = run(tmp_path, manifest, parameters={"should-print": should_print})
    assert runner.globals["workflow.parameters.json"] == (
        f'[{{"name":"should-print","value":"{should_print}"}}]'
    )
    assert result.status == "Succeeded"
    assert states(result) == {
        "[0].print-hello-govaluate": phase, "[0].print-hello-expr": phase,
        "[0].print-hello-expr-json": phase,
    }  # fmt: skip


UNRESOLVED = [  # (tag, scope, left as written?): Argo v4.0.5 expressionReplaceStrict
    # a variable out of scope and a failure: left unresolved (allowUnresolved)
    ("{{=jsonpath(workflow.parameters.nope, '$[0].value') == 'true'}}", {}, True),
    ("{{=workflow.parameters.nope}}", {}, True),  # nil, with a variable out of scope
    ("{{=nobody.here}}", {}, True),  # a name nothing defines
    # out of scope but evaluated without failing: written, as Argo writes it
    ("{{=workflow.parameters.nope == 'x'}}", {"workflow.parameters.p": "1"}, False),
    # a missing tasks.* or steps.* is strict (ReplaceStrict(..., ["tasks", "steps"])): fails
    ("{{=jsonpath(tasks.a.outputs.result, '$') == 'x'}}", {}, None),
    # every variable in scope and a failure: an Error, as before
    ("{{=asInt(workflow.parameters.p) + 'a'}}", {"workflow.parameters.p": "1"}, None),
]


@pytest.mark.parametrize(("tag", "scope", "left"), UNRESOLVED)
def test_a_tag_whose_variables_are_out_of_scope_is_left_unresolved(
    tag: str, scope: dict[str, str], left: bool | None
) -> None:
    """Argo leaves a ``{{=...}}`` tag whose variables are not in scope unresolved rather
    than failing (argo-workflows v4.0.5 util/template/expression_template.go
    ``expressionReplaceStrict``, ``allowUnresolved``); a missing ``tasks.``/``steps.``
    variable, or a failure with all of them in scope, fails."""
    scope = {"workflow.name": "wf", **scope}
    if left is None:
        with pytest.raises(ExpressionError, match="expression"):
            substitute(tag, scope)
    elif left:
        assert substitute(f"a {tag} b", scope) == f"a {tag} b"
    else:
        assert substitute(tag, scope) == "false"


def test_a_when_left_unresolved_is_an_error_as_argo_refuses_it(tmp_path: Path) -> None:
    """The tag stays in the ``when``, which is then no expression govaluate reads (Argo's
    ``shouldExecute``: "Invalid 'when' expression"): the step is an Error, the rest runs."""
    when = "{{=jsonpath(workflow.parameters.nope, '$[0].value') == 'true'}}"
    manifest = steps_workflow(
        [[{"name": "maybe", "template": "hi", "when": when}, {"name": "sure", "template": "hi"}]],
        [sh("hi", "echo hi")],
    )
    _, result = run(tmp_path, manifest)
    assert states(result) == {"[0].maybe": "Error", "[0].sure": "Succeeded"}
    assert result.tasks["[0].maybe"].message.startswith(f"invalid 'when' expression {when!r}")
