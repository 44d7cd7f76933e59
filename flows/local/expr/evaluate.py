"""Argo's expression tags ``{{=...}}``, evaluated here as Argo's controller does.

Argo compiles each tag with expr-lang (``util/template/expression_template.go``) over an
environment of its variables expanded into nested maps (``workflow.parameters.x`` becomes
``workflow["parameters"]["x"]``, ``util/expand``), plus ``asInt``, ``asFloat``,
``jsonpath``, ``toJson`` and ``sprig`` (``util/expr/env/env.go``). The result is written
in as JSON with the outer quotes of a string dropped. Never Python's ``eval``: the tree of
``flows.local.expr.syntax`` is walked by the functions below, with Go's rules for numbers
(``/`` always gives a float, ``%`` takes integers) and expr's for ``nil``, ``??`` and ``in``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from flows.local.errors import ExpressionError
from flows.local.expr.functions import (
    BUILTINS,
    equal,
    go_json,
    is_number,
    truthy,
    type_name,
)
from flows.local.expr.sprig import SPRIG
from flows.local.expr.syntax import Node, parse

__all__ = ["environment", "evaluate", "problems", "render"]


def environment(scope: Mapping[str, str]) -> dict[str, Any]:
    """Flat ``a.b.c`` names as nested maps (Argo's ``expand.Expand``: where both ``a.b``
    and ``a.b.c`` are given, the less specific one is dropped)."""
    root: dict[str, Any] = {}
    names = sorted(scope)
    for i, name in enumerate(names):
        if i + 1 < len(names) and names[i + 1].startswith(name + "."):
            continue
        node = root
        *parents, leaf = name.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = scope[name]
    return root


def evaluate(text: str, env: Mapping[str, Any]) -> Any:
    """The value of one expression over ``env`` (see ``environment``)."""
    return Evaluator(env).run(parse(text))


def render(value: Any) -> str:
    """What Argo writes in place of the tag: a string as it is, anything else as JSON."""
    if value is None:
        raise ExpressionError("the expression evaluated to nil")
    return value if isinstance(value, str) else go_json(value)


def problems(text: str) -> list[str]:
    """Why an expression cannot run here (syntax, an unknown function); empty when it can."""
    try:
        tree = parse(text)
    except ExpressionError as exc:
        return [f"syntax: {exc}"]
    found: list[str] = []
    _walk_calls(tree, found)
    return found


def _walk_calls(node: Any, found: list[str]) -> None:
    if not isinstance(node, tuple):
        if isinstance(node, list):
            for item in node:
                _walk_calls(item, found)
        return
    if node and node[0] == "call":
        callee = node[1]
        if callee[0] == "name" and callee[1] not in BUILTINS:
            found.append(f"function {callee[1]}() is not implemented")
        elif callee[0] == "member" and callee[1] == ("name", "sprig"):
            key = callee[2]
            if key[0] != "lit" or key[1] not in SPRIG:
                found.append(f"sprig.{key[1]}() is not implemented")
    for part in node[1:]:
        _walk_calls(part, found)


class Evaluator:
    def __init__(self, env: Mapping[str, Any], element: Any = None, index: int = 0) -> None:
        self.env = env
        self.element = element
        self.index = index

    def run(self, node: Node) -> Any:
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "name":
            if node[1] in self.env:
                return self.env[node[1]]
            if node[1] == "sprig":
                return SPRIG
            if node[1] in BUILTINS:
                raise ExpressionError(f"{node[1]} is a function: call it")
            raise ExpressionError(f"unknown name {node[1]}")
        if kind == "pointer":
            return self.index if node[1] == "index" else self.element
        if kind == "member":
            return self.member(node)
        if kind == "slice":
            return self.slice(node)
        if kind == "call":
            return self.call(node)
        if kind == "unary":
            return self.unary(node[1], self.run(node[2]))
        if kind == "binary":
            return self.binary(node)
        if kind == "cond":
            condition = self.run(node[1])
            if node[1] is node[2]:  # a ?: b
                return condition if truthy(condition) else self.run(node[3])
            if not isinstance(condition, bool):
                raise ExpressionError(f"non-bool {type_name(condition)} used as condition")
            return self.run(node[2] if condition else node[3])
        if kind == "array":
            return [self.run(item) for item in node[1]]
        if kind == "map":
            return {self.run(key): self.run(value) for key, value in node[1]}
        raise ExpressionError(f"a {kind} cannot be evaluated here")

    def member(self, node: Node) -> Any:
        target = self.run(node[1])
        key = self.run(node[2])
        if target is None:
            if node[3]:  # a?.b
                return None
            raise ExpressionError(f"cannot fetch {key} from nil")
        if isinstance(target, Mapping):
            return target.get(key)  # a missing key of a map is nil in expr
        if isinstance(target, (list, str)) and is_number(key) and not isinstance(key, float):
            size = len(target)
            i = key + size if key < 0 else key
            if not 0 <= i < size:
                raise ExpressionError(f"index out of range: {key} (array length is {size})")
            return target[i]
        raise ExpressionError(f"cannot fetch {key!r} from {type_name(target)}")

    def slice(self, node: Node) -> Any:
        target = self.run(node[1])
        if not isinstance(target, (list, str)):
            raise ExpressionError(f"cannot slice {type_name(target)}")
        low = 0 if node[2] is None else self.run(node[2])
        high = len(target) if node[3] is None else self.run(node[3])
        return target[low:high]

    def call(self, node: Node) -> Any:
        callee, arg_nodes = node[1], node[2]
        if callee[0] == "name" and callee[1] not in self.env:
            name = callee[1]
            function = BUILTINS.get(name)
            if function is None:
                raise ExpressionError(f"unknown function {name}()")
            if arg_nodes and arg_nodes[-1][0] == "closure":
                items = self.run(arg_nodes[0])
                return self.predicate(name, items, arg_nodes[1][1])
            return function(*[self.run(a) for a in arg_nodes])
        function = self.run(callee)
        if not callable(function):
            raise ExpressionError(f"{type_name(function)} is not a function")
        return function(*[self.run(a) for a in arg_nodes])

    def predicate(self, name: str, items: Any, body: Node) -> Any:
        if not isinstance(items, list):
            raise ExpressionError(f"{name}() takes an array, not {type_name(items)}")

        def each(i: int, item: Any) -> Any:
            return Evaluator(self.env, item, i).run(body)

        def test(i: int, item: Any) -> bool:
            value = each(i, item)
            if not isinstance(value, bool):
                raise ExpressionError(f"{name}() predicate gave {type_name(value)}, not bool")
            return value

        pairs = list(enumerate(items))
        results: dict[str, Callable[[], Any]] = {
            "map": lambda: [each(i, x) for i, x in pairs],
            "filter": lambda: [x for i, x in pairs if test(i, x)],
            "all": lambda: all(test(i, x) for i, x in pairs),
            "any": lambda: any(test(i, x) for i, x in pairs),
            "none": lambda: not any(test(i, x) for i, x in pairs),
            "one": lambda: sum(test(i, x) for i, x in pairs) == 1,
            "count": lambda: sum(test(i, x) for i, x in pairs),
            "find": lambda: next((x for i, x in pairs if test(i, x)), None),
            "sum": lambda: BUILTINS["sum"]([each(i, x) for i, x in pairs]),
        }
        return results[name]()

    @staticmethod
    def unary(op: str, value: Any) -> Any:
        if op in ("not", "!"):
            if not isinstance(value, bool):
                raise ExpressionError(f"invalid operation: {op} {type_name(value)}")
            return not value
        if not is_number(value):
            raise ExpressionError(f"invalid operation: {op} {type_name(value)}")
        return -value if op == "-" else value

    def binary(self, node: Node) -> Any:
        op = node[1]
        left = self.run(node[2])
        if op in ("and", "&&", "or", "||"):
            if not isinstance(left, bool):
                raise ExpressionError(f"non-bool {type_name(left)} in {op}")
            if left is (op in ("or", "||")):
                return left  # short-circuit as expr does
            right = self.run(node[3])
            if not isinstance(right, bool):
                raise ExpressionError(f"non-bool {type_name(right)} in {op}")
            return right
        if op == "??":
            return self.run(node[3]) if left is None else left
        return binary_operation(op, left, self.run(node[3]))


def binary_operation(op: str, left: Any, right: Any) -> Any:
    if op == "==":
        return equal(left, right)
    if op == "!=":
        return not equal(left, right)
    if op == "in":
        if isinstance(right, Mapping):
            return left in right
        if isinstance(right, list):
            return any(equal(left, item) for item in right)
        raise ExpressionError(f"invalid operation: in {type_name(right)}")
    if op in ("contains", "startsWith", "endsWith", "matches"):
        if not (isinstance(left, str) and isinstance(right, str)):
            raise ExpressionError(f"invalid operation: {type_name(left)} {op} {type_name(right)}")
        if op == "matches":
            return re.search(right, left) is not None
        return {"contains": right in left, "startsWith": left.startswith(right),
                "endsWith": left.endswith(right)}[op]  # fmt: skip
    if op == "+" and isinstance(left, str) and isinstance(right, str):
        return left + right
    if op == "+" and isinstance(left, list) and isinstance(right, list):
        return left + right
    if op in ("<", ">", "<=", ">=") and isinstance(left, str) and isinstance(right, str):
        return {"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[op]
    if not (is_number(left) and is_number(right)):
        raise ExpressionError(f"invalid operation: {type_name(left)} {op} {type_name(right)}")
    return _arithmetic(op, left, right)


def _arithmetic(op: str, left: int | float, right: int | float) -> Any:
    both_int = isinstance(left, int) and isinstance(right, int)
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "/":  # expr: always float64, division by zero gives +Inf/NaN as Go does
        if right == 0:
            return math.nan if left == 0 else math.copysign(math.inf, left)
        return float(left) / float(right)
    if op == "%":
        if not both_int:
            raise ExpressionError("invalid operation: % on float")
        if right == 0:
            raise ExpressionError("integer divide by zero")
        return int(math.fmod(left, right))  # Go's remainder takes the dividend's sign
    if op in ("**", "^"):
        return math.pow(left, right)
    if op == "..":
        if not both_int:
            raise ExpressionError("invalid operation: .. on float")
        return list(range(int(left), int(right) + 1))
    comparisons = {"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}
    if op in comparisons:
        return comparisons[op]
    raise ExpressionError(f"operator {op} is not implemented")
