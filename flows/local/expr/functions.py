"""The functions an Argo expression may call: expr-lang's builtins that workflows use, Argo's
``asInt``/``asFloat``/``jsonpath``/``toJson`` (``util/expr/env/env.go``) and a documented set
of Sprig's (``sprig.GenericFuncMap``, Masterminds/sprig v3), each with Go's semantics: Sprig's
casts give 0 for what they cannot read, expr's ``int`` fails instead."""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from flows.local.errors import ExpressionError


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def type_name(value: Any) -> str:
    names = {type(None): "nil", bool: "bool", int: "int", float: "float64", str: "string"}
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "map"
    return names.get(type(value), type(value).__name__)


def truthy(value: Any) -> bool:
    """``a ?: b``: ``a`` unless it is nil, false, zero or empty."""
    return value not in (None, False, 0, "") and value != [] and value != {}


def equal(left: Any, right: Any) -> bool:
    """expr's ``==``: numbers by value whatever their type, otherwise same type and value."""
    if is_number(left) and is_number(right):
        return left == right
    if type(left) is not type(right):
        return False
    return left == right


def go_float(value: float) -> str:
    """A float64 as Go's ``%v`` and ``encoding/json`` write it: shortest, no ``.0``."""
    if math.isinf(value) or math.isnan(value):
        return {math.inf: "+Inf", -math.inf: "-Inf"}.get(value, "NaN")
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{'-' if exponent.startswith('-') else '+'}{abs(int(exponent)):02d}"
    return text


def go_json(value: Any) -> str:
    """Go's ``json.Marshal``: compact, map keys sorted, ``<``, ``>`` and ``&`` escaped."""
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            raise ExpressionError(f"json: unsupported value: {go_float(value)}")
        return go_float(value)
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{go_json(k)}:{go_json(v)}" for k, v in items) + "}"
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_format(value: Any) -> str:
    """Go's ``fmt.Sprintf("%v", value)``, which expr's ``string()`` uses."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, list):
        return "[" + " ".join(go_format(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = sorted((str(k), v) for k, v in value.items())
        return "map[" + " ".join(f"{k}:{go_format(v)}" for k, v in items) + "]"
    return str(value)


def as_int(value: Any) -> int:
    """expr's ``int`` (Argo's ``asInt``): a number truncated, a string by ``strconv.Atoi``."""
    if is_number(value):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value):
        return int(value)
    raise ExpressionError(f"invalid operation: int({go_format(value)})")


def as_float(value: Any) -> float:
    """expr's ``float`` (Argo's ``asFloat``): a string by ``strconv.ParseFloat``."""
    if is_number(value):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.replace("_", "x") if "_" in value else value)
        except ValueError:
            pass
    raise ExpressionError(f"invalid operation: float({go_format(value)})")


def jsonpath(document: Any, path: str) -> Any:
    """Argo's ``jsonpath(json, path)``: the subset ``$``, ``.name``, ``['name']``, ``[n]``
    and ``[*]`` of the JSONPath it evaluates with evilmonkeyinc/jsonpath."""
    if not isinstance(document, str):
        raise ExpressionError(f"jsonpath() takes a JSON string, not {type_name(document)}")
    try:
        node: Any = json.loads(document)
    except json.JSONDecodeError as exc:
        raise ExpressionError(f"jsonpath(): invalid JSON: {exc}") from None
    if not path.startswith("$"):
        raise ExpressionError(f"jsonpath(): the path {path!r} does not start with $")
    steps = re.findall(r"\.([\w-]+)|\.\*|\[(\d+|-\d+|\*|'[^']*'|\"[^\"]*\")\]|(.)", path[1:])
    nodes, many = [node], False
    for name, bracket, stray in steps:
        if stray:
            raise ExpressionError(f"jsonpath(): {path!r} is not implemented here")
        key: Any = name or bracket.strip("'\"")
        if bracket and re.fullmatch(r"-?\d+", bracket):
            key = int(bracket)
        if key in ("*", ""):
            many = True
            nodes = [v for n in nodes for v in (n.values() if isinstance(n, dict) else n)]
            continue
        found = []
        for n in nodes:
            in_map = isinstance(n, dict) and isinstance(key, str) and key in n
            in_list = isinstance(n, list) and isinstance(key, int) and -len(n) <= key < len(n)
            if in_map or in_list:
                found.append(n[key])
            elif not many:
                raise ExpressionError(f"jsonpath(): {path!r}: {key!r} not found")
        nodes = found
    return nodes if many else nodes[0]


def _to_json(value: Any) -> str:
    return go_json(value)


def _from_json(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ExpressionError(f"fromJSON(): {exc}") from None


def _length(value: Any) -> int:
    if isinstance(value, (str, list, Mapping)):
        return len(value)
    raise ExpressionError(f"invalid argument for len (type {type_name(value)})")


def _string_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    def checked(*args: Any) -> Any:
        if not args or not isinstance(args[0], str):
            shown = type_name(args[0]) if args else "nothing"
            raise ExpressionError(f"{fn.__name__.strip('_')}() takes a string, not {shown}")
        return fn(*args)

    return checked


def _not_number(name: str, value: Any) -> Any:
    raise ExpressionError(f"invalid argument for {name} (type {type_name(value)})")


def _extreme(pick: Callable[..., Any]) -> Callable[..., Any]:
    def choose(*args: Any) -> Any:
        values = [v for a in args for v in (a if isinstance(a, list) else [a])]
        if not values or not all(is_number(v) for v in values):
            raise ExpressionError("max()/min() take numbers")
        return pick(values)

    return choose


BUILTINS: dict[str, Callable[..., Any]] = {
    # Argo's own (util/expr/env/env.go)
    "asInt": as_int,
    "asFloat": as_float,
    "jsonpath": jsonpath,
    "toJson": _to_json,
    # expr-lang builtins
    "int": as_int,
    "float": as_float,
    "string": go_format,
    "len": _length,
    "abs": lambda x: abs(x) if is_number(x) else _not_number("abs", x),
    "toJSON": lambda v: json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False),
    "fromJSON": _from_json,
    "toBase64": _string_fn(lambda s: base64.b64encode(s.encode()).decode()),
    "fromBase64": _string_fn(lambda s: base64.b64decode(s).decode()),
    "lower": _string_fn(str.lower),
    "upper": _string_fn(str.upper),
    "trim": _string_fn(lambda s, chars=None: s.strip(chars)),
    "trimPrefix": _string_fn(lambda s, p=" ": s.removeprefix(p)),
    "trimSuffix": _string_fn(lambda s, p=" ": s.removesuffix(p)),
    "split": _string_fn(lambda s, sep, n=-1: s.split(sep, n - 1 if n > 0 else -1)),
    "replace": _string_fn(lambda s, old, new: s.replace(old, new)),
    "repeat": _string_fn(lambda s, n: s * n),
    "indexOf": _string_fn(lambda s, sub: s.find(sub)),
    "lastIndexOf": _string_fn(lambda s, sub: s.rfind(sub)),
    "hasPrefix": _string_fn(lambda s, p: s.startswith(p)),
    "hasSuffix": _string_fn(lambda s, p: s.endswith(p)),
    "join": lambda items, sep="": sep.join(go_format(i) for i in items),
    "keys": lambda m: list(m.keys()),
    "values": lambda m: list(m.values()),
    "first": lambda items: items[0] if items else None,
    "last": lambda items: items[-1] if items else None,
    "reverse": lambda items: list(reversed(items)),
    "concat": lambda *lists: [v for items in lists for v in items],
    "max": _extreme(max),
    "min": _extreme(min),
    "sum": lambda items: (
        sum(items) if all(is_number(v) for v in items) else _not_number("sum", items)
    ),
    "mean": lambda items: float(sum(items)) / len(items) if items else 0.0,
    "round": lambda x: float(math.floor(x + 0.5)) if x >= 0 else -float(math.floor(-x + 0.5)),
    "ceil": lambda x: float(math.ceil(x)),
    "floor": lambda x: float(math.floor(x)),
    "type": type_name,
    "get": lambda m, k: m.get(k) if isinstance(m, Mapping) else m[k] if -len(m) <= k < len(m) else None,  # noqa: E501
    # predicates: the Evaluator runs them with # bound to each element
    **{n: _not_number for n in ("all", "any", "none", "one", "filter", "map", "count", "find")},
}  # fmt: skip
