"""Argo's ``{{...}}`` tags filled in: a simple tag ``{{name}}`` by its value, an expression
tag ``{{=expr}}`` by what the expression evaluates to (``flows.local.expr``), as Argo's
util/template/replace.go does for parameters."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.expr.evaluate import environment, evaluate, render

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
            return evaluate_tag(name[1:], scope)
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


def substitute_all(node: Any, scope: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return substitute(node, scope)
    if isinstance(node, Mapping):
        return {key: substitute_all(value, scope) for key, value in node.items()}
    if isinstance(node, list):
        return [substitute_all(value, scope) for value in node]
    return node
