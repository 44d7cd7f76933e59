"""The pipeline's jobs and InferenceService before the install's admission policy on what
the workflow's account creates (configs/cluster/pipeline/admission-policy.yaml, evaluated
by tests/helpers/admission_policies.py): each rendered for a config, and the policy's
refusals of one. Read by tests/test_cluster_admission.py and
tests/test_cluster_admission_variables.py."""

from __future__ import annotations

from typing import Any

from flows import cifar
from flows.manifests import inferenceservice as isvc
from flows.manifests.shared_pod import config_args
from steps.common.config import PipelineConfig, load_config
from tests.helpers import admission_policies as ap
from tests.helpers.flow_helpers import job_of
from tests.helpers.paths import REPO_ROOT

ACCOUNT = "system:serviceaccount:argo:cifar-pipeline"  # pipeline/rbac.yaml, in argo


def policy() -> tuple[dict[str, Any], dict[str, Any]]:
    return ap.policy(ap.WORKLOADS)


def refusals(obj: dict[str, Any], params: dict[str, Any], user: str = ACCOUNT) -> list[str]:
    """The messages the policy refuses ``obj`` with (empty: admitted)."""
    return ap.refusals(policy()[0], obj, params, user)


def rendered(cfg: PipelineConfig) -> list[dict[str, Any]]:
    template = cifar.build_template(cfg).to_dict()
    nodes = {"nodes": "2"} if cfg.train.launcher == "pytorchjob" else {}
    service = isvc.build_inferenceservice(
        cfg, model_uri="models:/m/1", labels={}, settings=config_args(cfg)
    )
    return [job_of(template, **nodes), job_of(template), service]


def base(kind: str, *sets: str) -> tuple[PipelineConfig, dict[str, Any]]:
    launcher = "trainjob" if kind == "TrainJob" else "pytorchjob"
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml", [f"train.launcher={launcher}", *sets])
    (multi, _, service) = rendered(cfg)
    return cfg, service if kind == "InferenceService" else multi
