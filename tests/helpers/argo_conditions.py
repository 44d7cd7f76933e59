"""Argo's resource-template conditions, evaluated as Argo evaluates them (a test helper).

argo-workflows v4.0.5 ``workflow/executor/resource.go``: ``WaitResource`` parses
``successCondition`` and ``failureCondition`` with ``labels.Parse`` (Kubernetes label
selectors: ``kubernetes/apimachinery pkg/labels/selector.go``), and ``matchConditions``
evaluates each requirement against the object's JSON, the requirement's key read as a
gjson path (``gjsonLabels``: ``Has`` is ``gjson.GetBytes(json, key).Exists()``, ``Get`` is
its ``.String()``). Then:

- ANY failure requirement that matches fails the step (the failure selector is an "or");
- ALL success requirements must match for the step to succeed (an "and"; none: success);
- otherwise Argo polls again.

What is kept from ``labels.Parse``: its lexer (special symbols ``= ! ( ) , > <``, keywords
``in`` / ``notin``), ``parseExactValue`` (``key ==`` with nothing after it means ``""``),
``in`` / ``notin`` value lists, the key checked as a qualified name and each value as a
label value (``NewRequirement``: ``>`` / ``<`` take one integer), and ``Requirement.Matches``
(a missing key fails ``=`` / ``in`` / ``>`` / ``<`` and satisfies ``!=`` / ``notin``; a
value that is not an integer fails ``>`` / ``<``). What is kept from gjson for such keys
(qualified names: letters, digits, ``-_./``): ``.`` separates path parts, a number indexes
an array, any part names an object key; ``String()`` gives a string's text, an integer's
digits, ``true`` / ``false``, ``""`` for null, and an object's or array's JSON.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

SPECIAL = "=!(),><"
TOKENS = {")", ",", "!", "==", "=", ">", "in", "<", "!=", "notin", "("}
OPERATORS = {"=", "==", "!=", ">", "<", "in", "notin"}
# validation.IsQualifiedName: an optional DNS-1123 subdomain prefix and "/", then a name
NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
QUALIFIED_NAME = re.compile(rf"({PREFIX}/)?{NAME}")
LABEL_VALUE = re.compile(rf"({NAME})?")  # validation.IsValidLabelValue
Outcome = Literal["succeeded", "failed", "waiting"]


class SelectorError(ValueError):
    """labels.Parse refuses the condition: Argo fails the step ("failed to parse")."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # =, ==, !=, in, notin, >, <, exists, !
    values: tuple[str, ...] = ()

    def matches(self, document: Any) -> bool:
        """``Requirement.Matches`` over ``gjsonLabels``."""
        has, value = gjson_get(document, self.key)
        if self.operator in ("=", "==", "in"):
            return has and value in self.values
        if self.operator in ("!=", "notin"):
            return not has or value not in self.values
        if self.operator == "exists":
            return has
        if self.operator == "!":
            return not has
        if not has or not re.fullmatch(r"[-+]?\d+", value):  # strconv.ParseInt fails
            return False
        number, bound = int(value), int(self.values[0])
        return number > bound if self.operator == ">" else number < bound


def lex(text: str) -> list[tuple[str, str]]:
    """(kind, literal) pairs: kind is the token itself, or "id" for an identifier."""
    items: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        if text[i] in " \t\r\n":
            i += 1
        elif text[i] in SPECIAL:  # the longest run of symbols that is a token
            j, found = i, None
            while j < len(text) and text[j] in SPECIAL:
                j += 1
                if text[i:j] in TOKENS:
                    found = j
                elif found is not None:
                    break
            if found is None:
                raise SelectorError(f"error expected: keyword found {text[i:j]!r}")
            items.append((text[i:found], text[i:found]))
            i = found
        else:
            j = i
            while j < len(text) and text[j] not in SPECIAL and text[j] not in " \t\r\n":
                j += 1
            word = text[i:j]
            items.append((word if word in ("in", "notin") else "id", word))
            i = j
    return [*items, ("end", "")]


def parse(selector: str) -> list[Requirement]:
    """``labels.Parse``: comma-separated requirements, sorted by key as it sorts them."""
    items = lex(selector)
    pos = 0

    def kind(context_values: bool = True) -> str:
        k = items[pos][0]
        return "id" if context_values and k in ("in", "notin") else k

    requirements: list[Requirement] = []
    while kind() != "end":
        if kind() not in ("id", "!"):
            raise SelectorError(f"found {items[pos][1]!r}, expected: !, identifier, or end")
        negated = kind() == "!"
        pos += negated
        if kind() != "id":
            raise SelectorError(f"found {items[pos][1]!r}, expected: identifier")
        key = items[pos][1]
        pos += 1
        if not QUALIFIED_NAME.fullmatch(key) or len(key.split("/")[-1]) > 63:
            raise SelectorError(f"key {key!r}: not a qualified name")
        if kind() in ("end", ","):
            requirements.append(Requirement(key, "!" if negated else "exists"))
        elif negated:
            raise SelectorError(f"found {items[pos][1]!r}, expected: ',' or end")
        else:
            operator = items[pos][0]
            if operator not in OPERATORS:
                raise SelectorError(f"found {items[pos][1]!r}, expected an operator")
            pos += 1
            values: list[str] = []
            if operator in ("in", "notin"):
                if kind() != "(":
                    raise SelectorError(f"found {items[pos][1]!r}, expected: '('")
                pos += 1
                while kind() != ")":
                    if kind() == "id":
                        values.append(items[pos][1])
                    elif kind() != ",":
                        raise SelectorError(f"found {items[pos][1]!r}, expected: ',' or ')'")
                    pos += 1
                pos += 1
                values = values or [""]
            elif kind() in ("end", ","):  # parseExactValue: nothing given is ""
                values = [""]
            elif kind() == "id":
                values = [items[pos][1]]
                pos += 1
            else:
                raise SelectorError(f"found {items[pos][1]!r}, expected: identifier")
            if operator in (">", "<") and not re.fullmatch(r"[-+]?\d+", values[0]):
                raise SelectorError(f"{key}{operator}{values[0]}: the value must be an integer")
            for value in values:
                if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
                    raise SelectorError(f"{key}: {value!r} is not a label value")
            requirements.append(Requirement(key, operator, tuple(values)))
        if kind() == ",":
            pos += 1
            if kind() not in ("id", "!"):
                raise SelectorError(f"found {items[pos][1]!r}, expected: identifier after ','")
        elif kind() != "end":
            raise SelectorError(f"found {items[pos][1]!r}, expected: ',' or end")
    return sorted(requirements, key=lambda r: r.key)


def gjson_get(document: Any, path: str) -> tuple[bool, str]:
    """(``Exists()``, ``String()``) of ``gjson.GetBytes`` for a qualified-name path."""
    node = document
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False, ""
    if node is None:
        return True, ""
    if isinstance(node, bool):
        return True, "true" if node else "false"
    if isinstance(node, str):
        return True, node
    if isinstance(node, (int, float)):
        return True, str(node) if isinstance(node, int) else format(node, "g")
    return True, json.dumps(node, separators=(",", ":"))


def outcome(document: Any, success: str, failure: str) -> Outcome:
    """What one poll of ``WaitResource`` decides for this object."""
    if not success and not failure:
        return "succeeded"  # WaitResource returns at once
    if any(r.matches(document) for r in parse(failure)):
        return "failed"
    if all(r.matches(document) for r in parse(success)):
        return "succeeded"
    return "waiting"
