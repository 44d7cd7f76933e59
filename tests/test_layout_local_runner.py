"""The local runner reads as Argo's controller does: run state passed to plain functions (no
mixins calling each other through declared stubs), ``run_node`` called by name, one
scheduling loop."""

from __future__ import annotations

import ast

import pytest

from tests.helpers.paths import REPO_ROOT

LOCAL = REPO_ROOT / "flows" / "local"


def declared_stubs(source: str, module: str) -> list[str]:
    """Attributes a class declares with a type and no value, outside a dataclass: a
    mixin's promise that another class in its hierarchy holds them (``_run_task:
    Callable``), a call the import graph cannot show."""
    stubs = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        decorators = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
        if decorators & {"dataclass", "dataclasses.dataclass"}:
            continue
        bases = {ast.unparse(b) for b in node.bases}
        if bases & {"Protocol", "typing.Protocol", "NamedTuple", "TypedDict"}:
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and item.value is None:
                stubs.append(f"{module}.{node.name}.{ast.unparse(item.target)}")
    return stubs


def test_no_local_runner_class_declares_what_another_holds() -> None:
    """The local runner passes its run state to plain functions (flows/local/state.py),
    no mixins calling each other through declared stubs."""
    stubs = [
        stub
        for path in sorted(LOCAL.rglob("*.py"))
        for stub in declared_stubs(path.read_text(), str(path.relative_to(REPO_ROOT)))
    ]
    assert stubs == []


def test_the_stub_check_finds_a_mixin() -> None:
    mixin = "class Steps:\n    tasks: dict\n    _run_task: Callable[..., None]\n"
    assert declared_stubs(mixin, "m") == ["m.Steps.tasks", "m.Steps._run_task"]
    held = "@dataclass\nclass State:\n    tasks: dict\n"
    assert declared_stubs(held, "m") == []


def run_node_as_a_value(source: str, module: str) -> list[str]:
    """Where ``run_node`` is handed on instead of called: a parameter of that name, or the
    name used other than as the function of a call (passed, stored, returned). Its
    callers are then found by reading for ``run_node(``, as Argo's for ``executeTemplate(``."""
    tree = ast.parse(source)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == "run_node":
            found.append(f"{module}:{node.lineno}: a parameter named run_node")
        named = (isinstance(node, ast.Name) and node.id == "run_node") or (
            isinstance(node, ast.Attribute) and node.attr == "run_node"
        )
        if named and isinstance(node.ctx, ast.Load) and id(node) not in called:
            found.append(f"{module}:{node.lineno}: run_node handed on as a value")
    return found


def test_run_node_is_called_by_name() -> None:
    """Who runs a node reads as it does in Argo's controller: the DAG's and steps' loop call
    ``run_node`` by name (executeTemplate), no function passed down to reach it."""
    found = [
        problem
        for path in sorted(LOCAL.rglob("*.py"))
        for problem in run_node_as_a_value(path.read_text(), str(path.relative_to(REPO_ROOT)))
    ]
    assert found == []
    assert "run_node(" in (LOCAL / "nodes" / "node.py").read_text()


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("def run_dag(state, run_node):\n    run_node(state)\n", "a parameter named run_node"),
        ("from x import run_node\nschedule(state, run_node)\n", "handed on as a value"),
        ("pool.submit(nodes.run_node, state)\n", "handed on as a value"),
        ("RUN = {'node': run_node}\n", "handed on as a value"),
    ],
    ids=["parameter", "argument", "attribute", "stored"],
)
def test_the_run_node_check_finds_it_handed_on(source: str, words: str) -> None:
    assert any(words in problem for problem in run_node_as_a_value(source, "m"))
    assert run_node_as_a_value("from x import run_node\nrun_node(state, task)\n", "m") == []


def test_the_local_runner_has_one_scheduling_loop() -> None:
    """Nodes start on threads in one place (flows/local/nodes/node.py's run_nodes)."""
    pools = [
        str(path.relative_to(REPO_ROOT))
        for path in sorted(LOCAL.rglob("*.py"))
        if "ThreadPoolExecutor(" in path.read_text()
    ]
    assert pools == ["flows/local/nodes/node.py"]
