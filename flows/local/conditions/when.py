"""A DAG task's ``when``, as Argo's ``shouldExecute`` (``workflow/controller/steps.go``)
evaluates it after its ``{{...}}`` tags are substituted: govaluate, with every bare word
(govaluate's variable) read as a string, so ``heads == heads`` holds without quotes.
Numbers are floats; ``==`` needs the same type; ``+`` joins text; ``=~`` matches a regular
expression; ``x in (a, b)``; ``? :`` and ``??``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.substitution import substitute

WHEN_TOKEN = re.compile(
    r"""\s*(?:(?P<number>\d+(?:\.\d+)?(?![\w.]))
    |(?P<string>'[^']*'|"[^"]*")
    |(?P<op>==|!=|>=|<=|=~|!~|&&|\|\||\?\?|\*\*|[-+*/%<>!?:(),])
    |(?P<word>[^\s=!<>&|?*+/%(),:'"-][^\s=!<>&|?*+/%(),:'"]*))""",
    re.VERBOSE,
)
WHEN_LEVELS = [("??",), ("||",), ("&&",), ("==", "!=", ">", "<", ">=", "<=", "=~", "!~", "in"),
               ("+", "-"), ("*", "/", "%"), ("**",)]  # fmt: skip


def when_true(text: str) -> bool:
    """A substituted ``when``: true or false, or ``ExpressionError`` for what is neither."""
    tokens: list[tuple[str, Any]] = []
    at = 0
    while text[at:].strip():
        match = WHEN_TOKEN.match(text, at)
        if not match:
            raise ExpressionError(f"invalid 'when' expression {text!r} at {text[at:].strip()!r}")
        kind = match.lastgroup or ""
        value: Any = match.group(kind)
        if kind == "number":
            value = float(value)
        elif kind == "string":
            value = value[1:-1]
        elif kind == "word":  # govaluate variables are strings in Argo; true/false are bools
            kind, value = ("bool", value == "true") if value in ("true", "false") else (
                "string", value
            )  # fmt: skip
            if value == "in":
                kind = "op"
        tokens.append((kind, value))
        at = match.end()
    result = _When(tokens, text).parse()
    if not isinstance(result, bool):
        raise ExpressionError(f"expected a boolean from 'when' {text!r}, got {result!r}")
    return result


class _When:
    def __init__(self, tokens: list[tuple[str, Any]], text: str) -> None:
        self.tokens, self.text, self.i = tokens, text, 0

    def peek(self) -> tuple[str, Any]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", None)

    def parse(self) -> Any:
        value = self.ternary()
        if self.i != len(self.tokens):
            raise ExpressionError(f"invalid 'when' expression {self.text!r}")
        return value

    def ternary(self) -> Any:
        value = self.level(0)
        if self.peek() == ("op", "?"):
            self.i += 1
            yes = self.ternary()
            no = None
            if self.peek() == ("op", ":"):
                self.i += 1
                no = self.ternary()
            return yes if value is True else no
        return value

    def level(self, n: int) -> Any:
        if n == len(WHEN_LEVELS):
            return self.prefix()
        value = self.level(n + 1)
        while self.peek()[0] == "op" and self.peek()[1] in WHEN_LEVELS[n]:
            op = self.tokens[self.i][1]
            self.i += 1
            right = self.level(n + 1) if op != "**" else self.level(n)
            value = _when_apply(op, value, right, self.text)
        return value

    def prefix(self) -> Any:
        kind, value = self.peek()
        self.i += 1
        if (kind, value) == ("op", "!"):
            operand = self.prefix()
            if not isinstance(operand, bool):
                raise ExpressionError(f"'!' on a non-boolean in 'when' {self.text!r}")
            return not operand
        if (kind, value) == ("op", "-"):
            operand = self.prefix()
            if not isinstance(operand, float):
                raise ExpressionError(f"'-' on a non-number in 'when' {self.text!r}")
            return -operand
        if (kind, value) == ("op", "("):
            items = [self.ternary()]
            while self.peek() == ("op", ","):
                self.i += 1
                items.append(self.ternary())
            if self.peek() != ("op", ")"):
                raise ExpressionError(f"a parenthesis is not closed in 'when' {self.text!r}")
            self.i += 1
            return items[0] if len(items) == 1 else items
        if kind in ("number", "string", "bool"):
            return value
        raise ExpressionError(f"invalid 'when' expression {self.text!r}")


def _when_apply(op: str, left: Any, right: Any, text: str) -> Any:
    numbers = isinstance(left, float) and isinstance(right, float)
    strings = isinstance(left, str) and isinstance(right, str)
    if op == "==":
        return left == right and type(left) is type(right)
    if op == "!=":
        return not (left == right and type(left) is type(right))
    if op in ("&&", "||"):
        if not (isinstance(left, bool) and isinstance(right, bool)):
            raise ExpressionError(f"'{op}' on non-booleans in 'when' {text!r}")
        return (left and right) if op == "&&" else (left or right)
    if op == "??":
        return right if left is None else left
    if op in ("=~", "!~") and strings:
        return (re.search(right, left) is not None) == (op == "=~")
    if op == "in" and isinstance(right, list):
        return any(left == item and type(left) is type(item) for item in right)
    if op in (">", "<", ">=", "<=") and (numbers or strings):
        return {">": left > right, "<": left < right, ">=": left >= right, "<=": left <= right}[op]
    if op == "+" and (strings or isinstance(left, str) or isinstance(right, str)):
        return _govaluate_text(left) + _govaluate_text(right)
    if numbers and op in ("+", "-", "*", "/", "%", "**"):
        if op in ("/", "%") and right == 0:
            raise ExpressionError(f"division by zero in 'when' {text!r}")
        return {"+": left + right, "-": left - right, "*": left * right, "/": left / right,
                "%": left % right, "**": left**right}[op]  # fmt: skip
    raise ExpressionError(f"'{op}' cannot compare {left!r} and {right!r} in 'when' {text!r}")


def _govaluate_text(value: Any) -> str:
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value).lower() if isinstance(value, bool) else str(value)


def when_says_run(task: Mapping[str, Any], scope: Mapping[str, str]) -> tuple[bool, str]:
    """(run?, the substituted ``when``); ``ExpressionError`` when it cannot be evaluated."""
    when = task.get("when")
    if when in (None, ""):
        return True, ""
    try:
        text = substitute(str(when), scope)
    except UnsupportedFeature as exc:  # a name with no value: Argo's Error, not a Failure
        raise ExpressionError(f"when {when!r}: {exc}") from None
    return when_true(text), text
