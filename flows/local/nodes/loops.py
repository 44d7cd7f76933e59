"""Argo's loops, locally: a DAG task or a step with ``withItems``, ``withParam`` or
``withSequence`` becomes one node per item (``expand``: a task or step as the nodes to
run for it), and the outputs of those nodes reach later tasks aggregated as JSON lists.

As Argo's controller does (``processItem``, ``generateNodeName``, ``expandSequence`` and
``processAggregateNodeOutputs`` in workflow/controller/operator.go): the node of item ``i``
is named ``name(i:description)``; ``{{item}}`` is a scalar item as text, a map or a list as
compact JSON (a map's keys sorted), and ``{{item.key}}`` each value of a map; a sequence's
items are strings formatted with ``format`` (``%d`` by default); aggregated outputs list the
succeeded nodes in item order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from flows.local.errors import LoopError, UnsupportedFeature
from flows.local.state import RunState
from flows.local.status import TaskRecord, TaskState
from flows.local.substitution import substitute, substitute_all

LOOP_FIELDS = ("withItems", "withParam", "withSequence")
Unit = tuple[str, dict[str, Any], dict[str, str]]  # a node to run: its key, task or step, scope


def is_loop(task: Mapping[str, Any]) -> bool:
    return any(field in task for field in LOOP_FIELDS)


def loop_items(task: Mapping[str, Any], scope: Mapping[str, str]) -> list[Any]:
    """The items a looping task runs over, its fields' ``{{...}}`` substituted first."""
    if "withItems" in task:
        return list(substitute_all(task["withItems"], scope))
    if "withParam" in task:
        text = substitute(str(task["withParam"]), scope)
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            items, reason = None, str(exc)
        else:
            reason = f"a JSON {type(items).__name__}, not a list"
        if not isinstance(items, list):
            raise LoopError(
                f"withParam value could not be parsed as a JSON list: {text.strip()}: {reason}"
            )
        return items
    return sequence(substitute_all(task["withSequence"], scope))


def sequence(spec: Mapping[str, Any]) -> list[str]:
    """``withSequence``: ``count`` items from ``start`` (0), or ``start`` to ``end`` both
    included, counting down when ``end`` is below ``start``."""

    def number(field: str) -> int:
        text = str(spec[field]).strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            raise LoopError(f"withSequence.{field} {spec[field]!r} is not an integer")
        return int(text)

    start = number("start") if "start" in spec else 0
    if "end" in spec:
        end = number("end")
    elif "count" in spec:
        count = number("count")
        if count == 0:
            return []
        end = start + count - 1
    else:
        raise LoopError("withSequence has neither end nor count")
    # Go's fmt verbs for an integer; %v prints it as %d does
    form = str(spec.get("format") or "%d").replace("%v", "%d")
    step = 1 if start <= end else -1
    try:
        return [form % i for i in range(start, end + step, step)]
    except (TypeError, ValueError) as exc:
        raise LoopError(f"withSequence.format {form!r}: {exc}") from None


def item_text(value: Any) -> str:
    """Argo's ``Item.String()``: a string as itself, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def item_scope(value: Any) -> dict[str, str]:
    """``{{item}}`` and, for a map, ``{{item.key}}``."""
    if isinstance(value, Mapping):
        scope = {f"item.{key}": item_text(v) for key, v in value.items()}
        compact = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        return {"item": compact, **scope}
    return {"item": item_text(value)}


def node_name(name: str, index: int, value: Any) -> str:
    """Argo's ``generateNodeName``: ``name(index:description)``, parentheses dropped from
    the description; a map is described by its ``key:value`` pairs sorted, a list as Go
    prints one (``[a b]``)."""
    if isinstance(value, Mapping):
        description = ",".join(sorted(f"{k}:{item_text(v)}" for k, v in value.items()))
    elif isinstance(value, list):
        description = "[" + " ".join(item_text(v) for v in value) + "]"
    else:
        description = item_text(value)
    return f"{name}({index}:{description.replace('(', '').replace(')', '')})"


def loop_index(key: str) -> int:
    return int(key.rsplit("(", 1)[1].split(":", 1)[0])


def aggregate(prefix: str, name: str, nodes: Iterable[TaskRecord]) -> dict[str, str]:
    """A loop's outputs as later tasks see them: ``outputs.parameters`` (a list of each
    node's parameters), ``outputs.parameters.NAME`` (a list of that parameter's values;
    parsed when every value is a JSON map or list) and ``outputs.result`` (the results, each
    parsed as JSON; left out when one is not JSON, where Argo fails the reference)."""
    base = f"{prefix}.{name}.outputs"
    parameters: list[dict[str, str]] = []
    values: dict[str, list[str]] = {}
    results: list[Any] = []
    results_json = True
    for node in sorted(nodes, key=lambda n: loop_index(n.name)):
        if not node.state.done_ok:
            continue
        if node.outputs:
            parameters.append(dict(node.outputs))
            for key, value in node.outputs.items():
                values.setdefault(key, []).append(value)
        if node.result is not None:
            try:
                results.append(json.loads(node.result))
            except json.JSONDecodeError:
                results_json = False
    scope = {f"{base}.parameters": _compact(parameters, sort_keys=True)}
    if results_json:
        scope[f"{base}.result"] = _compact(results)
    for key, listed in values.items():
        scope[f"{base}.parameters.{key}"] = _value_list(listed)
    return scope


def _value_list(values: list[str]) -> str:
    """Argo's ``aggregatedJSONValueList``: JSON maps and lists kept as JSON, else strings."""
    parsed = []
    for value in values:
        try:
            item = json.loads(value)
        except json.JSONDecodeError:
            return _compact(values)
        if not isinstance(item, (dict, list)):
            return _compact(values)
        parsed.append(item)
    return _compact(parsed, sort_keys=True)


def _compact(value: Any, sort_keys: bool = False) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=sort_keys, ensure_ascii=False)


def group_state(children: Iterable[TaskRecord]) -> TaskState:
    """A TaskGroup's phase once its nodes are done: the last failure's, else Succeeded."""
    state = TaskState.SUCCEEDED
    for child in children:
        if child.state.failed:
            state = child.state
    return state


def expand(
    state: RunState, key: str, name: str, task: dict[str, Any], scope: dict[str, str]
) -> tuple[TaskRecord | None, list[Unit], list[TaskRecord] | None]:
    """A task's or step's node and what to run for it (Argo's ``expandTask``): itself, or
    one node per item (the items' records, and no node of its own: a DAG adds its
    TaskGroup); a loop that cannot expand is an Error node, an empty one Skipped."""
    if not is_loop(task):
        return state.node(key, task["template"]), [(key, task, scope)], None
    try:
        items = loop_items(task, scope)
    except (LoopError, UnsupportedFeature) as exc:
        record = state.settle(key, task["template"], TaskState.ERROR, str(exc), "Skipped")
        return record, [], None
    if not items:
        record = state.settle(
            key, task["template"], TaskState.SKIPPED, "Skipped, empty params", "Skipped"
        )
        return record, [], None
    units: list[Unit] = []
    children = []
    parent = key[: -len(name)]
    for index, item in enumerate(items):
        child = parent + node_name(name, index, item)
        children.append(state.node(child, task["template"]))
        units.append((child, task, {**scope, **item_scope(item)}))
    return None, units, children
