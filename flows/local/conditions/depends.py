"""When a DAG task runs, as Argo's controller decides it (``workflow/controller/dag.go``):

- ``depends`` (docs/enhanced-depends-logic.md): operands ``task.Result`` joined by ``&&``,
  ``||``, ``!`` and parentheses; a plain ``task`` means ``(task.Succeeded || task.Skipped ||
  task.Daemoned)``, plus ``.Failed``/``.Errored`` where the task has ``continueOn``
  (``workflow/common/ancestry.go``); ``dependencies: [a, b]`` is ``a && b``. False: the task
  is Omitted.
- ``when``: see ``flows.local.conditions.when``; false, the task is Skipped.
- The DAG's phase (``assessDAGPhase``): each leaf task's own phase when it ran, else the
  phase inherited from the tasks above it, Failed or Error winning; so a failure a
  ``depends`` handles does not fail the workflow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flows.local.conditions.continue_on import continues
from flows.local.errors import ExpressionError
from flows.local.status import TaskRecord, TaskState

RESULTS = {"Succeeded", "Failed", "Errored", "Skipped", "Omitted", "Daemoned",
           "AnySucceeded", "AllFailed"}  # fmt: skip
DEPENDS_TOKEN = re.compile(
    r"\s*(?:(?P<operand>[a-zA-Z0-9][-a-zA-Z0-9]*?(?:\.[A-Z][a-zA-Z]+)?(?![-\w]))|(?P<op>&&|\|\||!|\(|\)))"
)


# --- depends ---------------------------------------------------------------------------------
def depends_logic(task: Mapping[str, Any], by_name: Mapping[str, Mapping[str, Any]]) -> str:
    """The task's ``depends`` (or ``dependencies``) with each plain name expanded."""
    text = task.get("depends") or " && ".join(task.get("dependencies", []))

    def expand(match: re.Match[str]) -> str:
        name = match.group(0)
        if "." in name:
            return name
        results = ["Succeeded", "Skipped", "Daemoned"]
        continue_on = by_name.get(name, {}).get("continueOn") or {}
        results += ["Errored"] if continue_on.get("error") else []
        results += ["Failed"] if continue_on.get("failed") else []
        return "(" + " || ".join(f"{name}.{r}" for r in results) + ")"

    return re.sub(r"[a-zA-Z0-9][-a-zA-Z0-9]*(?:\.[A-Z][a-zA-Z]+)?", expand, text)


def dependency_names(task: Mapping[str, Any]) -> list[str]:
    text = task.get("depends") or " && ".join(task.get("dependencies", []))
    names = re.findall(r"([a-zA-Z0-9][-a-zA-Z0-9]*?)(?:\.[A-Z][a-zA-Z]+)?(?![-\w])", text)
    return list(dict.fromkeys(names))


def depends_problems(task: Mapping[str, Any], known: set[str]) -> list[str]:
    """Why a task's ``depends`` cannot be evaluated: syntax, a result or task not there."""
    text = task.get("depends", "")
    if not text:
        unknown = [n for n in task.get("dependencies", []) if n not in known]
        return [f"dependencies: no task {name!r}" for name in unknown]
    if task.get("dependencies"):
        return ["depends and dependencies together (Argo refuses both)"]
    try:
        _DependsParser(text, {}).parse()
    except ExpressionError as exc:
        return [f"depends {text!r}: {exc}"]
    problems = []
    for _name, result in re.findall(r"([a-zA-Z0-9][-a-zA-Z0-9]*?)\.([A-Z][a-zA-Z]+)", text):
        if result not in RESULTS:
            problems.append(f"depends {text!r}: task result {result!r} (one of {sorted(RESULTS)})")
    for name in dependency_names(task):
        if name not in known:
            problems.append(f"depends {text!r}: no task {name!r}")
    return problems


def task_results(phase: str, children: list[str] | None = None) -> dict[str, bool]:
    """A finished task's operands (``evaluateDependsLogic``); ``children`` are the phases of
    a fanned-out task's items, for ``.AnySucceeded`` and ``.AllFailed``."""
    children = children or []
    return {
        "Succeeded": phase == "Succeeded",
        "Failed": phase == "Failed",
        "Errored": phase == "Error",
        "Skipped": phase == "Skipped",
        "Omitted": phase == "Omitted",
        "Daemoned": False,  # no daemon containers here
        "AnySucceeded": "Succeeded" in children,
        "AllFailed": bool(children) and all(p == "Failed" for p in children),
    }


def depends_true(logic: str, results: Mapping[str, Mapping[str, bool]]) -> bool:
    """``logic`` (from ``depends_logic``) over each dependency's ``task_results``."""
    return _DependsParser(logic, results).parse()


class _DependsParser:
    def __init__(self, text: str, results: Mapping[str, Mapping[str, bool]]) -> None:
        self.text, self.results, self.at = text, results, 0
        self.tokens: list[tuple[str, str]] = []
        while self.at < len(text.rstrip()):
            match = DEPENDS_TOKEN.match(text, self.at)
            if not match:
                raise ExpressionError(f"unexpected {text[self.at :].strip()[:10]!r}")
            kind = "operand" if match.group("operand") else "op"
            self.tokens.append((kind, match.group(kind)))
            self.at = match.end()
        self.i = 0

    def parse(self) -> bool:
        value = self.either()
        if self.i != len(self.tokens):
            raise ExpressionError(f"unexpected {self.tokens[self.i][1]!r}")
        return value

    def take(self, op: str) -> bool:
        if self.i < len(self.tokens) and self.tokens[self.i] == ("op", op):
            self.i += 1
            return True
        return False

    def either(self) -> bool:
        value = self.both()
        while self.take("||"):
            value = self.both() or value
        return value

    def both(self) -> bool:
        value = self.single()
        while self.take("&&"):
            value = self.single() and value
        return value

    def single(self) -> bool:
        if self.take("!"):
            return not self.single()
        if self.take("("):
            value = self.either()
            if not self.take(")"):
                raise ExpressionError("a parenthesis is not closed")
            return value
        if self.i >= len(self.tokens) or self.tokens[self.i][0] != "operand":
            raise ExpressionError("a task expected")
        name, _, result = self.tokens[self.i][1].partition(".")
        self.i += 1
        if not result:  # depends_logic expands plain names; here only when checking syntax
            return True
        return bool(self.results.get(name, {}).get(result, False))


# --- the phase of the DAG ---------------------------------------------------------------------
def dag_phase(
    tasks: list[Mapping[str, Any]], phases: Mapping[str, str], fail_fast: bool = True
) -> str:
    """Succeeded, Failed or Error, from the leaf tasks as ``assessDAGPhase`` judges them; a
    task still Running (or not yet decided, given as Running) tells nothing yet."""
    by_name = {t["name"]: t for t in tasks}
    parents = {t["name"]: dependency_names(t) for t in tasks}
    leaves = sorted(set(by_name) - {p for names in parents.values() for p in names})
    inherited: dict[str, set[str]] = {}

    def branch(name: str) -> set[str]:
        """The phases a task's branch may have (several paths may lead to it)."""
        if name not in inherited:
            phase = phases.get(name, "Omitted")
            if phase in ("Succeeded", "Failed", "Error"):
                inherited[name] = {phase}
            elif phase in ("Running", "Pending"):
                inherited[name] = set()
            else:  # Skipped and Omitted did not complete: they take their parents' phase
                above = [branch(p) for p in parents[name] if p in by_name]
                inherited[name] = set().union(*above) if above else {"Succeeded"}
        return inherited[name]

    result = "Succeeded"
    for leaf in leaves:
        found = branch(leaf)
        bad = [p for p in ("Failed", "Error") if p in found]
        bad = [p for p in bad if not continues(by_name[leaf], TaskState(p))]
        if bad:
            result = bad[0]
            if fail_fast:
                break
    return result


def depends_says_run(
    task: Mapping[str, Any],
    by_name: Mapping[str, Mapping[str, Any]],
    nodes: Mapping[str, TaskRecord],
    loops: Mapping[str, list[TaskRecord]],
) -> bool:
    """Whether the finished dependencies (a loop's with its items' phases, for
    ``.AnySucceeded`` and ``.AllFailed``) satisfy the task's ``depends``."""
    logic = depends_logic(task, by_name)
    if not logic:
        return True
    results = {
        name: task_results(node.state.phase, [c.state.phase for c in loops.get(name, [])])
        for name, node in nodes.items()
    }
    return depends_true(logic, results)
