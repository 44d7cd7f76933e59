"""The RBAC evaluator (tests/helpers/k8s_rbac.py) as Kubernetes' authorizer decides: roles
and bindings, cluster-wide and namespaced, each verb and resource; aggregated roles
refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.k8s_rbac import Rbac, Request, ServiceAccount

# --- the evaluator itself -------------------------------------------------------------


def _role(kind: str, name: str, rule: dict[str, Any], namespace: str | None = None):
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"kind": kind, "metadata": meta, "rules": [rule]}


def _binding(ref: str, subject: dict[str, str], namespace: str | None = None):
    kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    meta = {"name": "b", **({"namespace": namespace} if namespace else {})}
    ref_kind = "Role" if ref == "cache" else "ClusterRole"
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref}
    return {"kind": kind, "metadata": meta, "roleRef": role_ref, "subjects": [subject]}


CACHE_RULE = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["c1"]}
SAMPLE = [
    _role("Role", "cache", {**CACHE_RULE, "verbs": ["get", "create"]}, namespace="a"),
    # a ServiceAccount subject without namespace: the RoleBinding's own
    _binding("cache", {"kind": "ServiceAccount", "name": "t"}, namespace="a"),
    _role(
        "ClusterRole", "secrets", {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    ),
    _binding("secrets", {"kind": "ServiceAccount", "name": "t", "namespace": "a"}, namespace="c"),
    _role("ClusterRole", "all", {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
    _binding("all", {"kind": "Group", "name": "system:serviceaccounts:z"}),
]
T, OTHER, Z = ServiceAccount("a", "t"), ServiceAccount("a", "u"), ServiceAccount("z", "admin")


@pytest.mark.parametrize(
    ("account", "request_", "allowed"),
    [
        pytest.param(
            T, Request("get", "", "configmaps", "a", "c1"), True, id="role-in-its-namespace"
        ),
        pytest.param(T, Request("get", "", "configmaps", "a", "c2"), False, id="other-name"),
        pytest.param(T, Request("create", "", "configmaps", "a"), False, id="create-has-no-name"),
        pytest.param(
            T, Request("update", "", "configmaps", "a", "c1"), False, id="verb-not-granted"
        ),
        pytest.param(T, Request("get", "apps", "configmaps", "a", "c1"), False, id="other-group"),
        pytest.param(T, Request("get", "", "configmaps", "b", "c1"), False, id="other-namespace"),
        pytest.param(OTHER, Request("get", "", "configmaps", "a", "c1"), False, id="other-account"),
        pytest.param(
            T, Request("get", "", "secrets", "c", "s"), True, id="clusterrole-by-rolebinding"
        ),
        pytest.param(
            T, Request("get", "", "secrets", "a", "s"), False, id="rolebinding-stays-home"
        ),
        pytest.param(
            Z, Request("delete", "x.io", "things", "q", "n"), True, id="wildcards-by-group"
        ),
        pytest.param(Z, Request("create", "", "namespaces"), True, id="cluster-scoped"),
        pytest.param(T, Request("create", "", "namespaces"), False, id="no-cluster-binding"),
    ],
)
def test_rbac_evaluator(account: ServiceAccount, request_: Request, allowed: bool) -> None:
    assert Rbac(SAMPLE).allows(account, request_) is allowed


def test_rbac_evaluator_refuses_aggregated_roles() -> None:
    selectors = {"clusterRoleSelectors": [{"matchLabels": {"aggregate-to-all": "true"}}]}
    aggregated = {"kind": "ClusterRole", "metadata": {"name": "all"}, "aggregationRule": selectors}
    with pytest.raises(ValueError, match="aggregated"):
        Rbac([*SAMPLE[:-2], aggregated, SAMPLE[-1]]).allows(Z, Request("get", "", "pods", "q"))
