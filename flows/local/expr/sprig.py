"""Sprig's functions as Argo passes them to expressions (``sprig.GenericFuncMap``, v3, less
``env`` and ``expandenv``): a documented subset, each with Sprig's argument order (the
string last: ``sprig.trunc(16, s)``) and its lenient casts (what it cannot read is 0)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import zlib
from collections.abc import Callable
from typing import Any

from flows.local.errors import ExpressionError
from flows.local.expr.functions import equal, go_format, go_json, is_number, type_name


def _cast(value: Any, kind: type, parse: Callable[[str], Any]) -> Any:
    """spf13/cast, as Sprig calls it: a bool or number converted, a string parsed, and
    whatever it cannot read is 0."""
    if isinstance(value, bool) or is_number(value):
        return kind(value)
    if isinstance(value, str):
        try:
            return parse(value)
        except ValueError:
            pass
    return kind(0)


def to_int64(value: Any) -> int:
    """spf13/cast ``ToInt64``: a string as Go reads an integer literal (``0x1f``...)."""
    return _cast(value, int, lambda text: int(text.strip(), 0))


def to_float64(value: Any) -> float:
    """spf13/cast ``ToFloat64``."""
    return _cast(value, float, float)


def _typed(*kinds: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A Go function's parameter types: expr calls it by reflection and fails on a mismatch."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if len(args) != len(kinds):
                raise ExpressionError(
                    f"sprig function takes {len(kinds)} arguments, got {len(args)}"
                )
            for arg, kind in zip(args, kinds, strict=True):
                ok = isinstance(arg, kind) and not (kind is int and isinstance(arg, bool))
                if not ok:
                    raise ExpressionError(
                        f"sprig function argument {go_format(arg)!r}: a {type_name(arg)}, "
                        f"not {'string' if kind is str else kind.__name__}"
                    )
            return fn(*args)

        return call

    return wrap


def _trunc(count: int, text: str) -> str:
    if count < 0 and len(text) + count > 0:
        return text[len(text) + count :]
    if count >= 0 and len(text) > count:
        return text[:count]
    return text


def _substr(start: int, end: int, text: str) -> str:
    if start < 0:
        return text[:end]
    if end < 0 or end > len(text):
        return text[start:]
    return text[start:end]


def _empty(value: Any) -> bool:
    return value in (None, False, 0, "") or value == [] or value == {}


def _default(default: Any, *given: Any) -> Any:
    return default if not given or _empty(given[0]) else given[0]


def _b64dec(text: str) -> str:
    try:
        return base64.b64decode(text).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        return str(exc)  # Sprig returns the error's text


SPRIG: dict[str, Callable[..., Any]] = {
    "trunc": _typed(int, str)(_trunc),
    "substr": _typed(int, int, str)(_substr),
    "sha256sum": _typed(str)(lambda s: hashlib.sha256(s.encode()).hexdigest()),
    "sha1sum": _typed(str)(lambda s: hashlib.sha1(s.encode()).hexdigest()),
    "adler32sum": _typed(str)(lambda s: str(zlib.adler32(s.encode()))),
    "toString": lambda v: v if isinstance(v, str) else go_format(v),
    "int": to_int64,
    "int64": to_int64,
    "atoi": _typed(str)(to_int64),
    "float64": to_float64,
    "trim": _typed(str)(str.strip),
    "trimAll": _typed(str, str)(lambda cutset, s: s.strip(cutset)),
    "trimPrefix": _typed(str, str)(lambda prefix, s: s.removeprefix(prefix)),
    "trimSuffix": _typed(str, str)(lambda suffix, s: s.removesuffix(suffix)),
    "upper": _typed(str)(str.upper),
    "lower": _typed(str)(str.lower),
    "title": _typed(str)(lambda s: re.sub(r"\b\w", lambda m: m.group().upper(), s)),
    "repeat": _typed(int, str)(lambda n, s: s * n),
    "replace": _typed(str, str, str)(lambda old, new, s: s.replace(old, new)),
    "nospace": _typed(str)(lambda s: re.sub(r"\s", "", s)),
    "contains": _typed(str, str)(lambda sub, s: sub in s),
    "hasPrefix": _typed(str, str)(lambda prefix, s: s.startswith(prefix)),
    "hasSuffix": _typed(str, str)(lambda suffix, s: s.endswith(suffix)),
    "quote": lambda *a: " ".join(json.dumps(go_format(v)) for v in a if v is not None),
    "squote": lambda *a: " ".join(f"'{go_format(v)}'" for v in a if v is not None),
    "cat": lambda *a: " ".join(go_format(v) for v in a if v is not None),
    "splitList": _typed(str, str)(lambda sep, s: s.split(sep)),
    "join": lambda sep, items: sep.join(go_format(v) for v in items if v is not None),
    "default": _default,
    "empty": _empty,
    "coalesce": lambda *a: next((v for v in a if not _empty(v)), None),
    "ternary": lambda yes, no, condition: yes if condition is True else no,
    "b64enc": _typed(str)(lambda s: base64.b64encode(s.encode()).decode()),
    "b64dec": _typed(str)(_b64dec),
    "add": lambda *a: sum(to_int64(v) for v in a),
    "add1": lambda v: to_int64(v) + 1,
    "sub": lambda a, b: to_int64(a) - to_int64(b),
    "mul": lambda a, *rest: math.prod([to_int64(a), *(to_int64(v) for v in rest)]),
    "div": lambda a, b: int(to_int64(a) / to_int64(b)),  # Go truncates towards zero
    "mod": lambda a, b: int(math.fmod(to_int64(a), to_int64(b))),
    "max": lambda a, *rest: max([to_int64(a), *(to_int64(v) for v in rest)]),
    "min": lambda a, *rest: min([to_int64(a), *(to_int64(v) for v in rest)]),
    "regexMatch": _typed(str, str)(lambda pattern, s: re.search(pattern, s) is not None),
    "regexReplaceAll": _typed(str, str, str)(
        lambda pattern, s, repl: re.sub(pattern, re.sub(r"\$\{?(\w+)\}?", r"\\g<\1>", repl), s)
    ),
    "list": lambda *a: list(a),
    "has": lambda needle, items: any(equal(needle, v) for v in items or []),
    "toJson": go_json,
    "fromJson": lambda s: json.loads(s) if isinstance(s, str) else {},
}
