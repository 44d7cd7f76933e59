"""The syntax of Argo's ``{{=...}}`` expressions: the part of expr-lang (https://expr-lang.org)
a workflow uses, parsed into a small tree that ``flows.local.expr.evaluate`` evaluates.

Precedence and associativity are expr's own (``parser/operator/operator.go``): ``??`` 500,
``**`` 100 (right), ``* / %`` 60, ``+ -`` 30, ``..`` 25, comparisons and ``in``/``matches``/
``contains``/``startsWith``/``endsWith`` 20, ``and &&`` 15, ``or ||`` 10; unary ``- +`` 90,
``not !`` 50; the ternary ``? :`` last. ``a < b < c`` is ``a < b && b < c`` as in expr.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from flows.local.errors import ExpressionError

BINARY = {
    "or": 10, "||": 10, "and": 15, "&&": 15,
    "==": 20, "!=": 20, "<": 20, ">": 20, ">=": 20, "<=": 20, "in": 20, "matches": 20,
    "contains": 20, "startsWith": 20, "endsWith": 20, "..": 25, "+": 30, "-": 30,
    "*": 60, "/": 60, "%": 60, "**": 100, "^": 100, "??": 500,
}  # fmt: skip
RIGHT_ASSOCIATIVE = {"**", "^"}
COMPARISONS = {"<", ">", "<=", ">="}
UNARY = {"not": 50, "!": 50, "-": 90, "+": 90}
WORD_OPERATORS = {"and", "or", "not", "in", "matches", "contains", "startsWith", "endsWith"}
# builtins whose second argument is a predicate over each element (``#``)
PREDICATE_FUNCTIONS = {"all", "any", "none", "one", "filter", "map", "count", "find", "sum"}

TOKEN = re.compile(
    r"""(?P<space>\s+)
    |(?P<number>0[xX][0-9a-fA-F_]+|(?:\d[\d_]*(?:\.(?!\.)\d[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d+)?)
    |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<name>[A-Za-z_$][\w$]*)
    |(?P<pointer>\#[A-Za-z_]*)
    |(?P<op>\?\?|\?\.|\*\*|==|!=|<=|>=|&&|\|\||\.\.|[-+*/%^<>!?:.,()\[\]{}|])
    """,
    re.VERBOSE,
)
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}


@dataclass(frozen=True)
class Token:
    kind: str  # number, string, name, pointer, op, end
    value: Any
    at: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    at = 0
    while at < len(text):
        match = TOKEN.match(text, at)
        if match is None:
            raise ExpressionError(f"unexpected character {text[at]!r} at {at}")
        kind = match.lastgroup or ""
        word = match.group()
        if kind == "number":
            tokens.append(Token(kind, _number(word), at))
        elif kind == "string":
            tokens.append(Token(kind, _unquote(word), at))
        elif kind == "name" and word in WORD_OPERATORS:
            tokens.append(Token("op", word, at))
        elif kind != "space":
            tokens.append(Token(kind, word, at))
        at = match.end()
    tokens.append(Token("end", None, len(text)))
    return tokens


def _number(word: str) -> int | float:
    word = word.replace("_", "")
    if word[:2].lower() == "0x":
        return int(word, 16)
    if any(c in word for c in ".eE"):
        return float(word)
    return int(word)


def _unquote(word: str) -> str:
    if word[0] == "`":
        return word[1:-1]
    body = word[1:-1]
    return re.sub(
        r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)",
        lambda m: (
            chr(int(m.group(1)[1:], 16))
            if m.group(1)[0] in "ux" and len(m.group(1)) > 1
            else ESCAPES.get(m.group(1), m.group(1))
        ),
        body,
    )


# The tree: tuples whose first item names the node.
#   ("lit", value) ("name", n) ("pointer", n) ("member", obj, key_node, optional)
#   ("slice", obj, lo, hi) ("call", callee, args) ("unary", op, x) ("binary", op, l, r)
#   ("cond", c, yes, no) ("array", items) ("map", [(key_node, value_node)]) ("closure", body)
Node = tuple


class Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0  # inside a predicate, where # and .field mean the element

    @property
    def current(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def is_op(self, *values: str) -> bool:
        return self.current.kind == "op" and self.current.value in values

    def expect(self, value: str) -> None:
        if not self.is_op(value):
            raise ExpressionError(f"expected {value!r} at {self.current.at}, found {self._shown()}")
        self.next()

    def _shown(self) -> str:
        return "the end" if self.current.kind == "end" else repr(self.current.value)

    def parse(self) -> Node:
        node = self.expression(0)
        if self.current.kind != "end":
            raise ExpressionError(f"unexpected {self._shown()} at {self.current.at}")
        return node

    def expression(self, precedence: int) -> Node:
        left = self.primary()
        previous = ""
        while self.current.kind == "op":
            op = self.current.value
            negate = False
            if op == "not":
                following = self.tokens[self.i + 1]
                if following.kind != "op" or following.value not in (
                    "in", "matches", "contains", "startsWith", "endsWith",
                ):  # fmt: skip
                    raise ExpressionError(f"unexpected 'not' at {self.current.at}")
                if BINARY[following.value] < precedence:
                    break
                self.next()
                op, negate = following.value, True
            if op not in BINARY or BINARY[op] < precedence:
                break
            self.next()
            if previous == "??" and op != "??":
                raise ExpressionError(
                    f"operator {op} and ?? cannot be mixed without parentheses (expr's rule)"
                )
            if op in COMPARISONS:
                left = self.comparison(left, op)
            else:
                step = 0 if op in RIGHT_ASSOCIATIVE else 1
                left = ("binary", op, left, self.expression(BINARY[op] + step))
            if negate:
                left = ("unary", "not", left)
            previous = op
        if precedence == 0 and self.is_op("?"):
            self.next()
            if self.is_op(":"):  # a ?: b
                self.next()
                return ("cond", left, left, self.expression(0))
            yes = self.expression(0)
            self.expect(":")
            return ("cond", left, yes, self.expression(0))
        return left

    def comparison(self, left: Node, op: str) -> Node:
        result: Node | None = None
        while True:
            right = self.expression(BINARY[op] + 1)
            node = ("binary", op, left, right)
            result = node if result is None else ("binary", "&&", result, node)
            if not (self.current.kind == "op" and self.current.value in COMPARISONS):
                return result
            left, op = right, self.next().value

    def primary(self) -> Node:
        token = self.current
        if token.kind == "op" and token.value in UNARY:
            self.next()
            return self.postfix(("unary", token.value, self.expression(UNARY[token.value])))
        if self.is_op("("):
            self.next()
            node = self.expression(0)
            self.expect(")")
            return self.postfix(node)
        if self.depth and token.kind == "pointer":
            self.next()
            return self.postfix(("pointer", token.value[1:]))
        if self.depth and self.is_op(".") and self.tokens[self.i + 1].kind == "name":
            self.next()  # .field inside a predicate: #.field
            return self.postfix(("member", ("pointer", ""), ("lit", self.next().value), False))
        return self.postfix(self.secondary())

    def secondary(self) -> Node:
        token = self.next()
        if token.kind in ("number", "string"):
            return ("lit", token.value)
        if token.kind == "name":
            if token.value in ("true", "false"):
                return ("lit", token.value == "true")
            if token.value == "nil":
                return ("lit", None)
            if self.is_op("("):
                return self.call(("name", token.value), token.value)
            return ("name", token.value)
        if token.kind == "op" and token.value == "[":
            items = self.items("]")
            return ("array", items)
        if token.kind == "op" and token.value == "{":
            return self.map_literal()
        shown = "the end" if token.kind == "end" else repr(token.value)
        raise ExpressionError(f"unexpected {shown} at {token.at}")

    def items(self, close: str) -> list[Node]:
        items: list[Node] = []
        while not self.is_op(close):
            items.append(self.expression(0))
            if not self.is_op(close):
                self.expect(",")
        self.next()
        return items

    def map_literal(self) -> Node:
        pairs = []
        while not self.is_op("}"):
            token = self.next()
            if token.kind in ("name", "string", "number"):
                key: Node = ("lit", token.value)
            elif token.kind == "op" and token.value == "(":
                key = self.expression(0)
                self.expect(")")
            else:
                raise ExpressionError(f"a map key expected at {token.at}")
            self.expect(":")
            pairs.append((key, self.expression(0)))
            if not self.is_op("}"):
                self.expect(",")
        self.next()
        return ("map", pairs)

    def call(self, callee: Node, name: str | None) -> Node:
        self.expect("(")
        args: list[Node] = []
        while not self.is_op(")"):
            if name in PREDICATE_FUNCTIONS and len(args) == 1:
                args.append(self.predicate())
            else:
                args.append(self.expression(0))
            if not self.is_op(")"):
                self.expect(",")
        self.next()
        return ("call", callee, args)

    def predicate(self) -> Node:
        self.depth += 1
        try:
            if self.is_op("{"):
                self.next()
                body = self.expression(0)
                self.expect("}")
            else:
                body = self.expression(0)
        finally:
            self.depth -= 1
        return ("closure", body)

    def postfix(self, node: Node) -> Node:
        while True:
            if self.is_op(".", "?."):
                optional = self.next().value == "?."
                if self.is_op("["):
                    continue  # a?.[x]
                token = self.next()
                if token.kind not in ("name", "op") or not str(token.value).isidentifier():
                    raise ExpressionError(f"a field name expected at {token.at}")
                node = ("member", node, ("lit", token.value), optional)
                if self.is_op("("):
                    node = self.call(node, None)
            elif self.is_op("["):
                self.next()
                index = None if self.is_op(":") else self.expression(0)
                if self.is_op(":"):
                    self.next()
                    high = None if self.is_op("]") else self.expression(0)
                    self.expect("]")
                    node = ("slice", node, index, high)
                    continue
                self.expect("]")
                node = ("member", node, index, False)
            elif self.is_op("(") and node[0] == "member":
                node = self.call(node, None)
            else:
                return node


def parse(text: str) -> Node:
    """The tree of one expression; ``ExpressionError`` names where it stops parsing."""
    return Parser(text).parse()
