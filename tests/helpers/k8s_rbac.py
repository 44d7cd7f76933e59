"""A small Kubernetes RBAC evaluator: may this ServiceAccount do this verb on this object,
given the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings of a build?

It follows the RBAC authorizer's rules (kubernetes pkg/apis/rbac/v1/evaluation_helpers.go,
plugin/pkg/auth/authorizer/rbac/rbac.go): a RoleBinding grants its Role's or ClusterRole's
rules in its own namespace only, a ClusterRoleBinding grants a ClusterRole's rules
everywhere; ``*`` matches any group, resource or verb; a rule with ``resourceNames``
matches only a request that names one of them, never a create or a list (those carry no
name). Permissions are only ever added, so an unmatched request is denied. Aggregated
ClusterRoles are refused rather than guessed: the build holds no aggregation controller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class ServiceAccount:
    namespace: str
    name: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def groups(self) -> set[str]:
        return {
            "system:serviceaccounts",
            f"system:serviceaccounts:{self.namespace}",
            "system:authenticated",
        }


@dataclass(frozen=True)
class Request:
    """One API request: ``name`` None for create, list, watch of a collection."""

    verb: str
    group: str
    resource: str
    namespace: str | None = None  # None: a cluster-scoped object
    name: str | None = None


def _matches(values: Iterable[str], wanted: str) -> bool:
    values = list(values)
    return "*" in values or wanted in values


def rule_allows(rule: dict[str, Any], request: Request) -> bool:
    if "nonResourceURLs" in rule and not rule.get("resources"):
        return False
    names = rule.get("resourceNames") or []
    return (
        _matches(rule.get("verbs", []), request.verb)
        and _matches(rule.get("apiGroups", []), request.group)
        and _matches(rule.get("resources", []), request.resource)
        and (not names or (request.name is not None and request.name in names))
    )


class Rbac:
    """The RBAC objects of a build (other kinds are ignored)."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self.roles: dict[tuple[str, str], dict[str, Any]] = {}
        self.cluster_roles: dict[str, dict[str, Any]] = {}
        self.bindings: list[dict[str, Any]] = []
        self.cluster_bindings: list[dict[str, Any]] = []
        for obj in objects:
            kind, meta = obj.get("kind"), obj.get("metadata", {})
            if kind == "Role":
                self.roles[(meta["namespace"], meta["name"])] = obj
            elif kind == "ClusterRole":
                self.cluster_roles[meta["name"]] = obj
            elif kind == "RoleBinding":
                self.bindings.append(obj)
            elif kind == "ClusterRoleBinding":
                self.cluster_bindings.append(obj)

    @staticmethod
    def binds(binding: dict[str, Any], account: ServiceAccount) -> bool:
        home = binding["metadata"].get("namespace")
        for subject in binding.get("subjects") or []:
            kind, name = subject.get("kind"), subject.get("name")
            # a RoleBinding's ServiceAccount subject without namespace means its own
            names = {
                "ServiceAccount": {f"{subject.get('namespace') or home}/{name}"},
                "Group": account.groups,
                "User": {account.username},
            }.get(kind, set())
            wanted = f"{account.namespace}/{account.name}" if kind == "ServiceAccount" else name
            if wanted in names:
                return True
        return False

    def _role_rules(self, ref: dict[str, Any], namespace: str | None) -> list[dict[str, Any]]:
        if ref.get("apiGroup") != RBAC_GROUP:
            raise ValueError(f"roleRef {ref}: apiGroup must be {RBAC_GROUP}")
        if ref["kind"] == "ClusterRole":
            role = self.cluster_roles.get(ref["name"])
        else:
            role = self.roles.get((namespace or "", ref["name"]))
        if role is None:
            return []  # a binding to a missing role grants nothing
        if role.get("aggregationRule") is not None:
            raise ValueError(f"ClusterRole {ref['name']} is aggregated: not evaluated here")
        return list(role.get("rules") or [])

    def rules(self, account: ServiceAccount, namespace: str | None) -> list[dict[str, Any]]:
        """Every rule that applies to ``account`` for requests in ``namespace``."""
        found = []
        for binding in self.cluster_bindings:
            if self.binds(binding, account):
                found += self._role_rules(binding["roleRef"], None)
        for binding in self.bindings:
            home = binding["metadata"]["namespace"]
            if namespace == home and self.binds(binding, account):
                found += self._role_rules(binding["roleRef"], home)
        return found

    def allows(self, account: ServiceAccount, request: Request) -> bool:
        return any(rule_allows(r, request) for r in self.rules(account, request.namespace))

    def cluster_bindings_of(self, account: ServiceAccount) -> list[str]:
        return [b["metadata"]["name"] for b in self.cluster_bindings if self.binds(b, account)]

    def grants(self, account: ServiceAccount, namespace: str) -> set[tuple[str, str, str]]:
        """(group, resource, verb) of every rule for ``account`` in ``namespace``, as
        written (wildcards stay ``*``; a name-restricted rule counts too)."""
        return {
            (group, resource, verb)
            for rule in self.rules(account, namespace)
            for group in rule.get("apiGroups", [])
            for resource in rule.get("resources", [])
            for verb in rule.get("verbs", [])
        }
