"""No token where no Kubernetes API call is made (issue 38 item 4): every container step of
every rendered workflow runs with ``automountServiceAccountToken: false`` and the
executor's own account, which may only report its task results; the resource templates,
whose argoexec runs kubectl, keep the workflow's account.

What Argo does with the two fields (v4.0.5 workflow/controller/workflowpod.go
setupServiceAccount): the pod gets ``automountServiceAccountToken: false`` and a volume
``exec-sa-token`` from the Secret the controller finds for the executor's account
(util/secrets/secret_name.go TokenNameForServiceAccount: the account's first secret, its
``workflows.argoproj.io/service-account-token.name`` annotation, else
``<account>.service-account-token``); newExecContainer mounts that volume in the init and
wait containers only. A false automount without an executor account is refused
("executor.serviceAccountName must not be empty if automountServiceAccountToken is false").
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from flows import cifar
from steps.common.config import PipelineConfig, load_config
from tests.helpers import cluster_build as cb
from tests.helpers import k8s_refs as refs
from tests.helpers.k8s_rbac import Rbac, Request, ServiceAccount
from tests.helpers.paths import REPO_ROOT

CONFIGS = ["local", "smoke", "cluster", "kind"]
CASES = [(name, launcher) for name in CONFIGS for launcher in ("pytorchjob", "trainjob")]
# Argo v4.0.5 workflow/common/common.go, and util/secrets/secret_name.go TokenName
TOKEN_VOLUME = "exec-sa-token"
TOKEN_SECRET = "{}.service-account-token"
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"  # read by the token controller


@cache
def own() -> tuple[dict[str, Any], ...]:
    return tuple(cb.own_objects())


def templates(name: str, launcher: str) -> tuple[PipelineConfig, list[dict[str, Any]]]:
    cfg = load_config(REPO_ROOT / "configs" / f"{name}.yaml", [f"train.launcher={launcher}"])
    return cfg, cifar.build_template(cfg).to_dict()["spec"]["templates"]


def argo_pod_token(workflow_spec: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """What Argo v4.0.5 setupServiceAccount makes of a template's pod: its account, whether
    it automounts, and the executor's token Secret (None: the pod's own token)."""
    automount = template.get("automountServiceAccountToken")
    if automount is None:
        automount = workflow_spec.get("automountServiceAccountToken")
    executor = (template.get("executor") or {}).get("serviceAccountName") or (
        workflow_spec.get("executor") or {}
    ).get("serviceAccountName")
    if automount is False and not executor:
        raise ValueError("executor.serviceAccountName must not be empty if ... false")
    return {
        "serviceAccountName": template.get("serviceAccountName")
        or workflow_spec.get("serviceAccountName"),
        "automount": automount is not False,
        "executor_secret": TOKEN_SECRET.format(executor) if executor else None,
    }


@pytest.mark.parametrize(("name", "launcher"), CASES)
def test_no_container_step_mounts_the_workflow_accounts_token(name: str, launcher: str) -> None:
    cfg, found = templates(name, launcher)
    spec = cifar.build_template(cfg).to_dict()["spec"]
    containers = [t for t in found if "container" in t or "script" in t]
    # reuse-check and the exit handler's restore-champion too
    assert len(containers) == 9, [t["name"] for t in containers]
    for template in containers:
        pod = argo_pod_token(spec, template)
        assert pod["automount"] is False, template["name"]
        wanted = TOKEN_SECRET.format(cfg.cluster.executor_service_account)
        assert pod["executor_secret"] == wanted, template["name"]


@pytest.mark.parametrize(("name", "launcher"), CASES)
def test_resource_templates_keep_the_workflow_account(name: str, launcher: str) -> None:
    """train, deploy, the rollbacks and delete-train-job run kubectl with the workflow's
    account: its token stays, and no executor account replaces it."""
    cfg, found = templates(name, launcher)
    spec = cifar.build_template(cfg).to_dict()["spec"]
    resources = [t for t in found if "resource" in t]
    assert {t["name"] for t in resources} >= {"train", "deploy", "delete-train-job"}
    for template in resources:
        pod = argo_pod_token(spec, template)
        assert pod == {
            "serviceAccountName": cfg.cluster.service_account,
            "automount": True,
            "executor_secret": None,
        }, template["name"]


def test_a_false_automount_without_an_executor_account_is_refused() -> None:
    with pytest.raises(ValueError, match=r"executor\.serviceAccountName"):
        argo_pod_token({}, {"automountServiceAccountToken": False})


def test_the_executor_account_may_report_and_nothing_more() -> None:
    c = PipelineConfig().cluster
    account = ServiceAccount(c.namespace, c.executor_service_account)
    wanted = {(g, r, v) for (g, r), verbs in cb.EXECUTOR_NEEDS.items() for v in verbs}
    assert Rbac(list(own())).grants(account, c.namespace) == wanted
    assert Rbac(list(own())).cluster_bindings_of(account) == []
    for verb in ("get", "list"):
        request = Request(verb, "", "secrets", c.namespace, c.s3_secret)
        assert not Rbac(list(own())).allows(account, request)


def test_the_executor_accounts_token_secret_is_installed() -> None:
    """The Secret the controller mounts exists, of the type Kubernetes' token controller
    fills, for the executor account."""
    c = PipelineConfig().cluster
    key = ("Secret", c.namespace, TOKEN_SECRET.format(c.executor_service_account))
    (secret,) = [d for d in own() if refs.key_of(d) == key]
    assert secret["type"] == SA_TOKEN_TYPE
    assert secret["metadata"]["annotations"][SA_NAME_ANNOTATION] == c.executor_service_account
    assert ("ServiceAccount", c.namespace, c.executor_service_account) in {
        refs.key_of(d) for d in own()
    }
