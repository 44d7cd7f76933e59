"""The install's ValidatingAdmissionPolicies (configs/cluster/pipeline/admission-policy*.yaml)
evaluated as the API server evaluates them, with a maintained CEL implementation,
cel-python (``celpy``) (a test helper; kubernetes/website content/en/docs/reference/
access-authn-authz/validating-admission-policy.md): the matchConditions first (all must
hold, else the policy does not apply), then every validation; a validation that is false,
or that errors, refuses the object with its message (failurePolicy: Fail). The names the
API server gives: ``object``, ``oldObject`` (null on CREATE), ``request`` (its operation
and userInfo), ``params`` (the bound ConfigMap) and ``variables``, whose members are the
policy's spec.variables as "Variable composition" defines them: each evaluated when an
expression first refers to it, once, its error being the referring expression's error, and
each seeing only the variables before it.

Only the API server proves a policy on a cluster: its type checking (status.typeChecking)
and its CEL cost limits are not run here; matchConstraints (kinds, operations, namespaces)
are read by the tests, not evaluated.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import celpy.evaluation
import lark
import yaml

from steps.common.config import PipelineConfig
from tests.helpers.paths import REPO_ROOT

PIPELINE = REPO_ROOT / "configs" / "cluster" / "pipeline"
WORKLOADS = PIPELINE / "admission-policy.yaml"  # what the workflow's account creates
WORKFLOWS = PIPELINE / "admission-policy-workflows.yaml"  # what runs in argo
PARAMS = PIPELINE / "admission-params.yaml"
# The macros and functions the expressions may call (besides operators: in, +, ==, !=, !,
# &&, ||, ?:): standard CEL, in Kubernetes' CEL environment (apiserver/pkg/cel/environment
# base.go builds on cel-go's standard library, common/stdlib, and its macros, parser/macro.go
# AllMacros) and in cel-python's (celpy/evaluation.py: the macros of member_dot_arg,
# base_functions; matches() with google-re2, as cel-go's with Go's RE2). Neither optional
# types (a.?b), flatten, split nor join: cel-python lacks them, and Kubernetes' CEL has no
# flatten.
CEL_MACROS = {"has", "all", "map", "filter"}
CEL_FUNCTIONS = {"size", "startsWith", "matches"}
ALLOWED = "allowed"  # a params key serviceAccount.<name> allows <name>; its value is not read


@cache
def policy(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding in ``path``."""
    docs = list(yaml.safe_load_all(path.read_text()))
    (vap,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    return vap, binding


class Evaluator(celpy.evaluation.Evaluator):
    """cel-python's evaluator with ``has(e.f)`` as the CEL spec and cel-go define it
    (cel-spec doc/langdef.md "Field Selection"; cel-go interpreter/interpretable.go
    evalTestOnly): ``e`` is evaluated, and its error is has()'s error; a map answers
    whether ``f`` is its key; anything else errs. cel-python's own has() answers false
    for any error inside ``e.f``, so ``has(a.b.c)`` with no ``a.b`` would pass here and
    be refused by the API server: every intermediate field must be guarded."""

    def macro_has_eval(self, exprlist: lark.Tree) -> Any:
        node = exprlist
        while node.data != "member_dot":
            (node,) = [c for c in node.children if isinstance(c, lark.Tree)]
        operand, field = self.visit(node.children[0]), str(node.children[1])
        if isinstance(operand, celpy.CELEvalError):
            return operand
        if isinstance(operand, celpy.celtypes.MapType):
            return celpy.celtypes.BoolType(celpy.celtypes.StringType(field) in operand)
        return celpy.CELEvalError(f"has(): {type(operand).__name__} has no field {field!r}")

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:  # the macros' bodies: the same rule
        return Evaluator(ast, activation=self.activation)

    def _logical(self, tree: lark.Tree, operator: str) -> Any:
        """``a && b``, ``a || b``: an error on both sides is the left one (cel-go
        interpreter/interpretable.go evalAnd, evalOr); cel-python raises there instead."""
        left, right = self.visit_children(tree)
        if isinstance(left, celpy.CELEvalError) and isinstance(right, celpy.CELEvalError):
            return left
        try:
            return self.activation.resolve_function(operator)(left, right)
        except TypeError as exc:  # neither side a bool
            return celpy.CELEvalError(f"no matching overload for {operator}", TypeError, exc.args)

    def conditionaland(self, tree: lark.Tree) -> Any:
        if len(tree.children) != 2:
            return super().conditionaland(tree)
        return self._logical(tree, "_&&_")

    def conditionalor(self, tree: lark.Tree) -> Any:
        if len(tree.children) != 2:
            return super().conditionalor(tree)
        return self._logical(tree, "_||_")


class Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


@cache
def program(expression: str) -> Any:
    env = celpy.Environment(runner_class=Runner)
    return env.program(env.compile(expression))


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    return program(expression).evaluate(activation)


class Variables(celpy.celtypes.MapType):
    """``variables`` as the API server gives it: ``variables.x`` evaluates x's expression
    when first read, once (its value or its error kept); an error is returned as CEL's
    error value, so it is the error of the expression that reads it, and only where that
    expression's result depends on it (``true || error`` is true). A variable sees only
    the variables defined before it."""

    def __init__(
        self,
        definitions: list[dict[str, str]],
        activation: dict[str, Any],
        memo: dict[str, Any] | None = None,
        visible: int | None = None,
    ) -> None:
        super().__init__()
        self._definitions = definitions
        self._activation = activation
        self._memo = {} if memo is None else memo
        self._visible = len(definitions) if visible is None else visible

    def __getitem__(self, name: Any) -> Any:
        names = [d["name"] for d in self._definitions[: self._visible]]
        if name not in names:
            raise KeyError(name)  # celpy: "no such member", an error
        if name not in self._memo:
            at = names.index(name)
            earlier = Variables(self._definitions, self._activation, self._memo, at)
            try:
                value = program(self._definitions[at]["expression"]).evaluate(
                    {**self._activation, "variables": earlier}
                )
            except celpy.CELEvalError as exc:
                value = exc
            self._memo[name] = value
        return self._memo[name]


def activation_of(
    obj: dict[str, Any],
    params: dict[str, Any],
    user: str,
    *,
    groups: tuple[str, ...] = (),
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    request = {"operation": operation, "userInfo": {"username": user, "groups": list(groups)}}
    given = {"object": obj, "oldObject": old, "request": request, "params": params}
    return {k: celpy.json_to_cel(v) for k, v in given.items()}


def refusals(
    vap: dict[str, Any], obj: dict[str, Any], params: dict[str, Any], user: str, **request: Any
) -> list[str]:
    """The messages ``vap`` refuses ``obj`` with (empty: admitted, or not its concern)."""
    activation = activation_of(obj, params, user, **request)
    for condition in vap["spec"]["matchConditions"]:
        if not evaluate(condition["expression"], activation):
            return []
    activation["variables"] = Variables(vap["spec"]["variables"], activation)
    found = []
    for validation in vap["spec"]["validations"]:
        try:
            ok = bool(evaluate(validation["expression"], activation))
        except celpy.CELEvalError as exc:  # failurePolicy: Fail
            ok, validation = False, {**validation, "message": f"error: {exc}"}
        if not ok:
            found.append(validation["message"])
    return found


def expressions(vap: dict[str, Any]) -> list[str]:
    spec = vap["spec"]
    return [
        x["expression"]
        for part in ("matchConditions", "variables", "validations")
        for x in spec[part]
    ]


def calls(vap: dict[str, Any]) -> set[str]:
    """The functions and macros the expressions call (a string's contents aside)."""
    code = [re.sub(r"'[^']*'", "''", e) for e in expressions(vap)]
    return {name for e in code for name in re.findall(r"([A-Za-z_]\w*)\s*\(", e)}


def referred(expression: str) -> set[str]:
    return set(re.findall(r"\bvariables\.(\w+)", expression))


def params_of(cfg: PipelineConfig, accounts: tuple[str, ...] = ("default",)) -> dict[str, Any]:
    """The parameters admission-params.yaml documents, from a config, allowing ``accounts``
    for the jobs' pods (the install: the namespace's default account alone)."""
    c = cfg.cluster
    data = {
        "registry": cfg.images.registry,
        "rdmaRoot": str(c.rdma and c.rdma_memlock == "root").lower(),
        "hostNetwork": str(c.host_network).lower(),
        "trainingRuntime": c.trainer_runtime,
        **{f"serviceAccount.{name}": ALLOWED for name in accounts},
        "workflowServiceAccount": c.service_account,
        "executorServiceAccount": c.executor_service_account,
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data}
