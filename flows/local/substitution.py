"""Argo's ``{{...}}`` tags filled in: a simple tag ``{{name}}`` by its value, an expression
tag ``{{=expr}}`` by what the expression evaluates to (``flows.local.expr``), as Argo's
util/template/replace.go does for parameters.

An expression tag that names a variable not in scope, and fails or gives nil, is left as it
is written rather than failing, as Argo v4.0.5 leaves it (util/template/expression_template.go
``expressionReplaceStrict``: missing identifiers make ``allowUnresolved``, unless one starts
with a strict prefix, ``tasks`` or ``steps`` where a DAG task's or a step's ``when`` and
arguments are resolved, workflow/controller/dag.go and steps.go ``ReplaceStrict``). A
``when`` left so is no boolean, and its node an Error, as Argo's ``shouldExecute`` refuses it.
A tag whose variables are all in scope and that fails is an Error, as before."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.expr.evaluate import environment, evaluate, render
from flows.local.expr.syntax import Node, parse

# A simple tag {{name}}, or an expression tag {{=expr}} that, as in Argo's templates, ends
# at the first "}}" (it may hold braces and span lines).
EXPRESSION = re.compile(r"\{\{\s*(=[\s\S]*?|[^{}]*?)\s*\}\}")


def expressions(node: Any) -> Iterator[str]:
    """Every ``{{...}}`` expression in a nested structure of dicts, lists and strings."""
    if isinstance(node, str):
        yield from EXPRESSION.findall(node)
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from expressions(value)
    elif isinstance(node, list):
        for value in node:
            yield from expressions(value)


def substitute(text: str, scope: Mapping[str, str]) -> str:
    """Replace each ``{{name}}`` with ``scope[name]``, as Argo does for parameters."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("="):
            try:
                return evaluate_tag(name[1:], scope)
            except ExpressionError:
                if unresolved_allowed(name[1:], scope):
                    return match.group(0)  # Argo's allowUnresolved: the tag as written
                raise
        if name not in scope:
            raise UnsupportedFeature(f"expression {{{{{name}}}}} has no value here")
        return scope[name]

    return EXPRESSION.sub(replace, text)


def evaluate_tag(text: str, scope: Mapping[str, str]) -> str:
    """An expression tag's text in place, as Argo writes it; a failure names the tag."""
    try:
        return render(evaluate(text, environment(scope)))
    except ExpressionError as exc:
        raise ExpressionError(f"expression {{{{={text}}}}}: {exc}") from None
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError) as exc:
        raise ExpressionError(f"expression {{{{={text}}}}}: {exc}") from None


ARGO_FUNCTIONS = ("sprig", "asInt", "asFloat", "jsonpath", "toJson")
STRICT_PREFIXES = re.compile(r"^(tasks|steps)(\.|$)")  # Argo's getStrictRegex(["tasks", "steps"])


def unresolved_allowed(text: str, scope: Mapping[str, str]) -> bool:
    """Whether Argo leaves this expression tag unresolved when it fails: some variable it
    names is not in scope, and none of those starts with ``tasks.`` or ``steps.``
    (``expressionReplaceStrict``, ``hasVarInEnv``)."""
    try:
        names = identifiers(parse(text))
    except ExpressionError:
        return False  # Argo reports the syntax error
    env = environment(scope)
    missing = [name for name in names if not _in_env(env, name)]
    return bool(missing) and not any(STRICT_PREFIXES.match(name) for name in missing)


def identifiers(node: Node) -> list[str]:
    """The variables an expression names, as Argo's ``identifierVisitor`` collects them: each
    name, and each ``a.b.c`` (``a['b']``) path of string keys; functions called are not."""
    found: list[str] = []

    def visit(part: Any) -> None:
        if isinstance(part, list):
            for item in part:
                visit(item)
            return
        if not isinstance(part, tuple) or not part:
            return
        if part[0] == "call" and part[1][0] == "name":
            visit(part[2])  # a function's own name is in Argo's environment
            return
        path = _member_path(part)
        if path and path not in found:
            found.append(path)
        for child in part[1:]:
            visit(child)

    visit(node)
    return found


def _member_path(node: Node) -> str | None:
    if node[0] == "name":
        return str(node[1])
    if node[0] == "member" and node[2][0] == "lit" and isinstance(node[2][1], str):
        base = _member_path(node[1])
        return f"{base}.{node[2][1]}" if base else None
    return None


def _in_env(env: Mapping[str, Any], name: str) -> bool:
    """Argo's ``hasVarInEnv`` over the nested variables and the functions it adds
    (util/expr/env/env.go ``GetFuncMap``: asInt, asFloat, jsonpath, toJson, sprig.*)."""
    if name.split(".", 1)[0] in ARGO_FUNCTIONS:
        return True
    node: Any = env
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def substitute_all(node: Any, scope: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return substitute(node, scope)
    if isinstance(node, Mapping):
        return {key: substitute_all(value, scope) for key, value in node.items()}
    if isinstance(node, list):
        return [substitute_all(value, scope) for value in node]
    return node
