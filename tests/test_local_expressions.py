"""Argo's ``{{=...}}`` expressions, ``when`` and enhanced ``depends`` in the local runner.

Expected values come from Argo's own documents and examples (argoproj/argo-workflows at
f016ad89): docs/variables.md ("Expression"), docs/enhanced-depends-logic.md,
examples/expression-*.yaml and conditionals.yaml, and the e2e workflows under
test/e2e/functional/ with the outcomes test/e2e/functional_test.go asserts for them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.local.checks.fields import unsupported
from flows.local.conditions.depends import depends_logic, depends_true, task_results
from flows.local.conditions.when import when_true
from flows.local.errors import ExpressionError
from flows.local.expr.evaluate import environment, evaluate, render
from flows.local.substitution import substitute
from flows.local.workflow import LocalRunner
from tests.helpers.local_examples import EXAMPLES, states

WEATHER = '{"weekWeather": "eyJ0ZW1wcyI6IFszNCwgMjcsIDE1LCA1NywgNDZdfQo="}'
SCOPE = {
    "inputs.parameters.my-int-param": "3",
    "inputs.parameters.my-float-param": "1.5",
    "inputs.parameters.my-string-param": "  padded  ",
    "inputs.parameters.json": '{"some": {"path": "found"}}',
    "inputs.parameters.foo": "3",
    "inputs.parameters.should-print": "true",
    "workflow.parameters.config": '{"a": "1", "b": "2", "c": "3"}',
    "workflow.parameters.weather": WEATHER,
    "workflow.parameters.data-source": "synthetic:64",
    "workflow.parameters.nodes": "2",
    "workflow.parameters.json": '[{"name": "should-print", "value": "true"}]',
    "tasks.flip-coin.outputs.parameters.result": "heads",
    "tasks.flip-coin.status": "Succeeded",
}
VERBOSE_SNIPPET = """
  map([
      jsonpath(sprig.b64dec(jsonpath(workflow.parameters.weather, '$.weekWeather')), '$.temps')
    ], {
      toJson({
        avg: sprig.add(#[0], #[1], #[2], #[3], #[4]) / 5,
        min: sprig.min(#[0], #[1], #[2], #[3], #[4]),
        max: sprig.max(#[0], #[1], #[2], #[3], #[4])
      })
  })[0]
"""

EVALUATED = [
    # docs/variables.md, "Expression" examples
    ("plain list", "[1, 2]", "[1,2]"),
    ("filter", "filter([1, 2], { # > 1})", "[2]"),
    ("map", "map([1, 2], { # * 2 })", "[2,4]"),
    ("asInt", "asInt(inputs.parameters['my-int-param'])", "3"),
    ("asFloat", "asFloat(inputs.parameters['my-float-param'])", "1.5"),
    ("string", "string(1)", "1"),
    ("toJson", "toJson([1, 2])", "[1,2]"),
    ("jsonpath", "jsonpath(inputs.parameters.json, '$.some.path')", "found"),
    ("sprig.trim", "sprig.trim(inputs.parameters['my-string-param'])", "padded"),
    # examples/expression-tag-template-workflow.yaml
    ("withParam", "toJson(filter([1, 3], {# > 1}))", "[3]"),
    ("asInt times", "asInt(inputs.parameters.foo) * 10", "30"),
    # examples/expression-destructure-json.yaml
    ("destructure", "jsonpath(workflow.parameters.config, '$.b')", "2"),
    # examples/conditionals.yaml (expr forms) and test/e2e/testdata/json-variables.yaml
    ("bracket quote", "inputs.parameters[\"should-print\"] == 'true'", "true"),
    ("json variable", "jsonpath(workflow.parameters.json, '$[0].value') == 'true'", "true"),
    # examples/dag-conditional-parameters.yaml
    ("ternary", "tasks['flip-coin'].outputs.parameters.result == 'heads' ? 'H' : 'T'", "H"),
    # examples/skipped-output-defaults/expression-fallback.yaml: absent is nil
    ("fallback", "tasks['flip-coin'].outputs.parameters.msg ?? 'expr-fallback'", "expr-fallback"),
    # the pipeline's own (flows/pipeline/train_templates.py, flows/cifar.py)
    ("workers", "asInt(workflow.parameters.nodes) - 1", "1"),
    (
        "cache key",
        "sprig.trunc(16, sprig.sha256sum(workflow.parameters['data-source']))",
        hashlib.sha256(b"synthetic:64").hexdigest()[:16],
    ),
    # expr-lang's rules (Go numbers): / is float, % integer, ** float
    ("divide", "7 / 2", "3.5"),
    ("divide whole", "4 / 2", "2"),
    ("remainder sign", "-7 % 3", "-1"),
    ("power", "2 ** 10", "1024"),
    ("mixed", "1 + 1.5", "2.5"),
    ("precedence", "1 + 2 * 3 == 7 && !false", "true"),
    ("unary minus binds looser than **", "-2 ** 2", "-4"),
    ("chained comparison", "1 < 2 < 3", "true"),
    ("not in", "'c' not in ['a', 'b']", "true"),
    ("in map", "'a' in {a: 1}", "true"),
    ("string ops", "'abc' startsWith 'a' and 'abc' contains 'bc'", "true"),
    ("concatenation", "'cifar-' + workflow.parameters.nodes", "cifar-2"),
    ("numbers equal across types", "1 == 1.0", "true"),
    ("string is not a number", "'1' == 1", "false"),
    ("negative index", "[1, 2, 3][-1]", "3"),
    ("slice", "'abcdef'[1:3]", "bc"),
    ("map literal as JSON", "{b: [1, 2.5], a: true}", '{"a":true,"b":[1,2.5]}'),
    ("builtin", "upper(trim('  x '))", "X"),
    # Sprig: the string is the last argument; casts give 0 for what they cannot read
    ("sprig.trunc from the end", "sprig.trunc(-3, 'abcdef')", "def"),
    ("sprig.int lenient", "sprig.int('abc')", "0"),
    ("sprig.default", "sprig.default('d', '')", "d"),
    ("sprig.replace", "sprig.replace('a', 'b', 'aaa')", "bbb"),
    ("sprig.toString float", "sprig.toString(1.5)", "1.5"),
]


@pytest.mark.parametrize(
    ("expression", "expected"), [c[1:] for c in EVALUATED], ids=[c[0] for c in EVALUATED]
)
def test_expression_values_as_argo_writes_them(expression: str, expected: str) -> None:
    assert render(evaluate(expression, environment(SCOPE))) == expected
    # as in Argo, the tag ends at the first "}}": a space keeps a closing brace apart
    assert substitute(f"<{{{{= {expression} }}}}>", SCOPE) == f"<{expected}>"


def test_a_multi_line_expression_of_argo_examples_reusing_verbose_snippets() -> None:
    # examples/expression-reusing-verbose-snippets.yaml: temps 34, 27, 15, 57, 46
    week = substitute(f"{{{{={VERBOSE_SNIPPET}}}}}", SCOPE)
    assert week == '{"avg":35.8,"max":57,"min":15}'
    scope = {**SCOPE, "inputs.parameters.week-temps": week}
    env = "{{=jsonpath(inputs.parameters['week-temps'], '$.%s')}}"
    assert [substitute(env % k, scope) for k in ("avg", "min", "max")] == ["35.8", "15", "57"]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("asInt('x')", r"invalid operation: int\(x\)"),
        ("'a' + 1", "invalid operation: string \\+ int"),
        # a missing name outside tasks.* / steps.* is left unresolved, as Argo leaves it
        # (tests/test_local_conditionals.py UNRESOLVED); under steps.* it fails by name
        ("steps.nobody.here", "unknown name steps"),
        ("1 +", "unexpected the end"),
        ("1 and true", "non-bool int in and"),
        ("sprig.trunc('16', 'abc')", "a string, not int"),
        ("tasks.x ?? 1 + 2", "cannot be mixed"),
        ("3 % 1.5", "% on float"),
    ],
)
def test_expression_errors_name_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        substitute(f"{{{{={expression}}}}}", {**SCOPE, "tasks.x": "1"})


def test_unknown_functions_and_bad_syntax_are_refused_before_the_run(tmp_path: Path) -> None:
    manifest = workflow(
        [{"name": "a", "template": "say", "arguments": {"parameters": [
            {"name": "m", "value": "{{=sprig.date('2006', workflow.creationTimestamp)}}"}]}}],
        [say("{{inputs.parameters.m}} {{=lower(}}")],
    )  # fmt: skip
    problems = unsupported(manifest)
    assert (
        "template main expression {{=sprig.date('2006', workflow.creationTimestamp)}}: "
        "sprig.date() is not implemented" in problems
    )
    assert any(p.startswith("template say expression {{=lower(}}: syntax") for p in problems)
    with pytest.raises(ValueError, match=r"sprig\.date"):
        LocalRunner(manifest, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


WHEN = [
    ("heads == heads", True),  # examples/dag-conditional-parameters.yaml: bare words
    ("tails == heads", False),
    ("true == true", True),  # examples/conditionals.yaml, govaluate form
    ('"true" == "true"', True),  # test/e2e/functional/dag-skipped-output-ref.yaml
    ('"false" == "true"', False),
    ("false", False),  # test/e2e/functional/dag-skipped-producer-default.yaml
    ("Failed == Succeeded", False),  # examples/status-reference.yaml
    ("5 > 3 && 2.5 <= 2.5", True),
    ("4 + 1 == 5", True),
    ("abc =~ '^a'", True),
    ("!(1 > 2)", True),
    ("x in (a, x)", True),
]


@pytest.mark.parametrize(("text", "expected"), WHEN)
def test_when_is_govaluate_with_bare_words_as_strings(text: str, expected: bool) -> None:
    assert when_true(text) is expected


@pytest.mark.parametrize("text", ["heads", "3 > abc", "1 +", "(true"])
def test_a_when_that_is_not_a_boolean_is_an_error(text: str) -> None:
    with pytest.raises(ExpressionError):
        when_true(text)


DEPENDS = [  # docs/enhanced-depends-logic.md
    ("task || task-2.Failed", {"task": "Skipped", "task-2": "Succeeded"}, True),
    ("task || task-2.Failed", {"task": "Failed", "task-2": "Succeeded"}, False),
    ("task || task-2.Failed", {"task": "Failed", "task-2": "Failed"}, True),
    ("(task-2.Succeeded || task-2.Skipped) && !task-3.Failed",
     {"task-2": "Skipped", "task-3": "Succeeded"}, True),
    ("(task-2.Succeeded || task-2.Skipped) && !task-3.Failed",
     {"task-2": "Succeeded", "task-3": "Failed"}, False),
    ("a.Errored", {"a": "Error"}, True),
    ("a.Omitted || b", {"a": "Succeeded", "b": "Omitted"}, False),
    ("a && b", {"a": "Succeeded", "b": "Skipped"}, True),
]  # fmt: skip


@pytest.mark.parametrize(("depends", "phases", "expected"), DEPENDS)
def test_depends_truth_table(depends: str, phases: dict[str, str], expected: bool) -> None:
    logic = depends_logic({"depends": depends}, {})
    results = {name: task_results(phase) for name, phase in phases.items()}
    assert depends_true(logic, results) is expected


@pytest.mark.parametrize(
    ("task", "problem"),
    [
        ({"depends": "a && (b"}, "depends 'a && (b': a parenthesis is not closed"),
        ({"depends": "a.Finished"}, "task result 'Finished'"),
        ({"depends": "a || nobody"}, "depends 'a || nobody': no task 'nobody'"),
        ({"dependencies": ["nobody"]}, "dependencies: no task 'nobody'"),
        ({"depends": "a", "dependencies": ["a"]}, "depends and dependencies together"),
    ],
)
def test_depends_that_cannot_be_evaluated_is_refused_before_the_run(
    tmp_path: Path, task: dict[str, Any], problem: str
) -> None:
    manifest = workflow(
        [{"name": "a", "template": "say"}, {"name": "t", "template": "say", **task}],
        [say("hi")],
    )
    assert any(problem in p for p in unsupported(manifest)), unsupported(manifest)
    with pytest.raises(ValueError, match="does not implement"):
        LocalRunner(manifest, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_plain_name_with_continue_on_failed_accepts_its_failure() -> None:
    # workflow/common/ancestry.go expandDependency
    logic = depends_logic({"depends": "a"}, {"a": {"continueOn": {"failed": True}}})
    assert logic == "(a.Succeeded || a.Skipped || a.Daemoned || a.Failed)"


# --- Argo's example workflows run here ---------------------------------------------------------
ARGOSAY = EXAMPLES / "argosay.py"


def example(name: str) -> dict[str, Any]:
    """An Argo example as published; argosay containers (no command: the image's
    entrypoint) run ``argosay.py``, the same commands on this machine."""
    manifest = yaml.safe_load((EXAMPLES / name).read_text())
    for template in manifest["spec"]["templates"]:
        container = template.get("container", {})
        if container.get("image", "").startswith("argoproj/argosay") and not container.get(
            "command"
        ):
            container["command"] = ["python", str(ARGOSAY)]
    return manifest


def run(tmp_path: Path, manifest: dict[str, Any]):
    runner = LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "cache", cwd=tmp_path)
    return runner.run()


def log(result, task: str) -> str:
    return (result.run_dir / "logs" / f"{task}.log").read_text()


def test_argo_example_dag_enhanced_depends(tmp_path: Path) -> None:
    """examples/dag-enhanced-depends.yaml: C fails, which should-execute-1 expects; the
    examples suite expects the workflow to succeed."""
    result = run(tmp_path, example("dag-enhanced-depends.yaml"))
    assert states(result) == {
        "A": "Succeeded", "B": "Succeeded", "C": "Failed", "should-execute-1": "Succeeded",
        "should-execute-2": "Succeeded", "should-not-execute": "Omitted",
        "should-execute-3": "Succeeded",
    }  # fmt: skip
    assert result.status == "Succeeded"


def test_argo_e2e_dag_when_expr_skip(tmp_path: Path) -> None:
    """B's when {{= workflow.parameters.data != '' }} is false: B Skipped, and its argument
    (a jsonpath of the empty parameter, an error if evaluated) is never evaluated."""
    result = run(tmp_path, example("dag-when-expr-skip.yaml"))
    assert result.status == "Succeeded"
    assert states(result) == {"A": "Succeeded", "B": "Skipped"}
    assert result.tasks["B"].message == "when 'false' evaluated false"


def test_argo_e2e_dag_when_expr_runs_with_data(tmp_path: Path) -> None:
    manifest = example("dag-when-expr-skip.yaml")
    manifest["spec"]["arguments"]["parameters"][0]["value"] = '{"id": "item-7"}'
    result = run(tmp_path, manifest)
    assert states(result) == {"A": "Succeeded", "B": "Succeeded"}
    assert "item-7" in log(result, "B")


def test_argo_e2e_dag_skipped_output_reference_is_an_error(tmp_path: Path) -> None:
    """functional_test.go: workflow Error, stage-b Skipped, stage-c Error "absent optional"."""
    result = run(tmp_path, example("dag-skipped-output-ref.yaml"))
    assert result.status == "Error"
    assert states(result) == {"stage-a": "Succeeded", "stage-b": "Skipped", "stage-c": "Error"}
    assert "absent optional" in result.tasks["stage-c"].message


def test_argo_e2e_dag_skipped_output_ref_runs_when_asked(tmp_path: Path) -> None:
    manifest = example("dag-skipped-output-ref.yaml")
    manifest["spec"]["arguments"]["parameters"][0]["value"] = "true"
    result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert "[hello from stage A] and [hello from stage B]" in log(result, "stage-c")


@pytest.mark.parametrize(
    ("name", "received"),
    [
        ("dag-skipped-producer-default.yaml", "hello-from-producer"),
        ("dag-skipped-consumer-default.yaml", "fallback-from-input"),
    ],
)
def test_argo_e2e_skipped_outputs_take_the_declared_defaults(
    tmp_path: Path, name: str, received: str
) -> None:
    result = run(tmp_path, example(name))
    assert result.status == "Succeeded"
    assert states(result) == {"producer": "Skipped", "consumer": "Succeeded"}
    assert f"consumer got: [{received}]" in log(result, "consumer")


def say(script: str, **extra: Any) -> dict[str, Any]:
    inputs = {"parameters": [{"name": "m", "default": ""}]}
    command = ["sh", "-c", f"echo {script}"]
    return {
        "name": "say",
        "inputs": inputs,
        "container": {"image": "i", "command": command},
        **extra,
    }


def workflow(tasks: list[dict], templates: list[dict], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {"entrypoint": "main",
                 "templates": [{"name": "main", "dag": {"tasks": tasks}}, *templates], **spec},
    }  # fmt: skip


def test_a_failed_when_expression_is_an_error_not_a_failure(tmp_path: Path) -> None:
    report = f"echo {{{{workflow.status}}}} > {tmp_path}/status; "
    report += f"cat > {tmp_path}/failures <<'END'\n{{{{workflow.failures}}}}\nEND\n"
    bye = {"name": "bye", "container": {"image": "i", "command": ["sh", "-c", report]}}
    manifest = workflow(
        [{"name": "a", "template": "say", "when": "{{=asInt('x') > 1}}"}],
        [say("{{inputs.parameters.m}}"), bye],
        onExit="bye",
    )
    result = run(tmp_path, manifest)
    assert result.status == "Error"
    assert states(result) == {"a": "Error"}
    assert "invalid operation: int(x)" in result.tasks["a"].message
    assert (tmp_path / "status").read_text().strip() == "Error"
    (failure,) = json.loads(json.loads((tmp_path / "failures").read_text()))  # Argo quotes it
    assert (failure["displayName"], failure["phase"]) == ("a", "Error")


def test_status_and_outputs_of_earlier_tasks_in_when_and_expressions(tmp_path: Path) -> None:
    out = {"parameters": [{"name": "n", "valueFrom": {"path": "/tmp/out/n"}}]}
    count = {"name": "count", "container": {"image": "i", "command": ["sh", "-c",
             "mkdir -p /tmp/out; echo 41 > /tmp/out/n"]}, "outputs": out}  # fmt: skip
    arguments = {
        "parameters": [{"name": "m", "value": "{{=asInt(tasks.a.outputs.parameters.n) + 1}}"}]
    }
    manifest = workflow(
        [
            {"name": "a", "template": "count"},
            {"name": "b", "template": "say", "depends": "a", "arguments": arguments,
             "when": "{{tasks.a.status}} == Succeeded && {{tasks.a.outputs.parameters.n}} > 40"},
            {"name": "c", "template": "say", "depends": "a",
             "when": "{{tasks.a.status}} != Succeeded"},
            {"name": "d", "template": "say", "depends": "c.Succeeded"},
        ],
        [say("{{inputs.parameters.m}}"), count],
    )  # fmt: skip
    result = run(tmp_path, manifest)
    assert states(result) == {"a": "Succeeded", "b": "Succeeded", "c": "Skipped", "d": "Omitted"}
    assert result.status == "Succeeded"
    assert "42" in log(result, "b")


def test_entrypoint_inputs_take_the_arguments_and_their_expressions(tmp_path: Path) -> None:
    # examples/expression-destructure-json.yaml's inputs, on a DAG entrypoint
    config = '{"a": "1", "b": "2", "c": "3"}'
    manifest = workflow(
        [{"name": "a", "template": "say", "arguments": {"parameters": [
            {"name": "m", "value": "{{inputs.parameters.a}}{{inputs.parameters.c}}"}]}}],
        [say("{{inputs.parameters.m}}")],
        arguments={"parameters": [{"name": "config", "value": config}]},
    )  # fmt: skip
    manifest["spec"]["templates"][0]["inputs"] = {"parameters": [
        {"name": "a", "value": "{{=jsonpath(workflow.parameters.config, '$.a')}}"},
        {"name": "c", "value": "{{=jsonpath(workflow.parameters.config, '$.c')}}"},
    ]}  # fmt: skip
    result = run(tmp_path, manifest)
    assert result.status == "Succeeded"
    assert log(result, "a").splitlines()[-1] == "13"
