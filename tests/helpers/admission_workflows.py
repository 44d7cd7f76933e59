"""The pipeline's workflows before the install's admission policy on Workflows,
WorkflowTemplates and CronWorkflows (configs/cluster/pipeline/admission-policy-workflows.yaml,
evaluated by tests/helpers/admission_policies.py): each rendered fresh for a config, and
the policy's refusals of one as the submitter (or another user) sends it. Read by
tests/test_cluster_admission_workflows.py and tests/test_cluster_admission_runs.py."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from typing import Any

from flows import cifar
from steps.common.config import PipelineConfig, load_config
from tests.helpers import admission_policies as ap
from tests.helpers.paths import REPO_ROOT

NAMESPACE = "argo"
SUBMITTER = "system:serviceaccount:argo:cifar-pipeline-submitter"  # submitter-rbac.yaml
FOREIGN = "argo-server"  # reads Secrets cluster-wide (cluster_build.py ARGO_SERVER)
Change = Callable[[dict[str, Any]], Any]  # what a hostile variant does to a spec
ACCOUNTS = "its pods run as the pipeline's service account"


def policy() -> tuple[dict[str, Any], dict[str, Any]]:
    return ap.policy(ap.WORKFLOWS)


def refusals(obj: dict[str, Any], params: dict[str, Any], **request: Any) -> list[str]:
    request.setdefault("groups", ("system:serviceaccounts", "system:authenticated"))
    return ap.refusals(policy()[0], obj, params, request.pop("user", SUBMITTER), **request)


def config(name: str = "cluster", *sets: str) -> PipelineConfig:
    return load_config(REPO_ROOT / "configs" / f"{name}.yaml", list(sets))


@cache
def _rendered(cfg_json: str) -> tuple[dict[str, Any], ...]:
    cfg = PipelineConfig.model_validate_json(cfg_json)
    values = {"epochs": "1", "data-source": "synthetic:64"}
    return (
        cifar.build_template(cfg).to_dict(),
        cifar.build_submission(cfg, values).to_dict(),
        cifar.build_cron_workflow(cfg, values).to_dict(),
    )


def rendered(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """The WorkflowTemplate, a run of it with -p values (what --submit and the local runner
    send) and the CronWorkflow (fresh copies: a test changes them)."""
    return copy.deepcopy(list(_rendered(cfg.model_dump_json())))


def template_of(cfg: PipelineConfig) -> dict[str, Any]:
    return rendered(cfg)[0]


def hostile_template(cfg: PipelineConfig) -> dict[str, Any]:
    template = template_of(cfg)
    template["spec"]["serviceAccountName"] = FOREIGN
    return template
