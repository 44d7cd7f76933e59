"""What every pod the workflow starts gets from the cluster, checked without one: the
config it rebuilds from its ``--set`` arguments (cluster.* included, so MLflow's params
describe the run), and Secrets it can start without."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.cifar import build_template
from steps.common.config import load_config
from steps.common.config.loader import dump_config
from tests.helpers.flow_helpers import CONFIGS, argo_substitute, job_of, parameter_values, templates
from tests.helpers.paths import REPO_ROOT


def step_args(wf: dict[str, Any]) -> dict[str, list[str]]:
    """Each pod's arguments as the pod gets them (the parameters' defaults filled in)."""
    values = parameter_values(wf)
    return {n: [argo_substitute(a, values) for a in args] for n, args in found_args(wf).items()}


def found_args(wf: dict[str, Any]) -> dict[str, list[str]]:
    found = {n: t["container"]["args"] for n, t in templates(wf).items() if "container" in t}
    job = job_of(wf)
    if job["kind"] == "TrainJob":
        found["train"] = job["spec"]["trainer"]["args"]
    else:
        (replica, *_) = job["spec"]["pytorchReplicaSpecs"].values()
        found["train"] = replica["template"]["spec"]["containers"][0]["args"]
    return found


def rebuilt(args: list[str]) -> dict[str, Any]:
    """The config a step builds: the embedded default and its ``--set`` arguments."""
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    return dump_config(load_config(None, sets))


@pytest.mark.parametrize("launcher", ["pytorchjob", "trainjob"])
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_step_rebuilds_the_flows_cluster_settings(path: Path, launcher: str) -> None:
    """MLflow logs every section of the config a step rebuilds (steps/train/report.py
    flatten): a cluster run must not record the default cluster (nodes=1, gpus=0)."""
    cfg = load_config(path, [f"train.launcher={launcher}"])
    wf = build_template(cfg).to_dict()
    wanted = dump_config(cfg)
    for name, args in step_args(wf).items():
        config = rebuilt(args)
        assert config["cluster"] == wanted["cluster"], name


def test_every_pod_logs_in_to_mlflow_as_its_role() -> None:
    """configs/cluster.yaml names the steps' MLflow user (cluster.mlflow_secret) and the
    predictor's (cluster.predictor_mlflow_secret); the MLflow server configs/cluster deploys
    authenticates every request (its basic-auth app), and docs/cluster.md creates both
    Secrets. Each is required: a missing Secret holds the pod in CreateContainerConfigError,
    naming it, rather than a step failing at its first request. Steps and training ranks
    log in as the pipeline's user, the predictors as the read-only one."""
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml")
    wf = build_template(cfg).to_dict()
    containers = [(n, t["container"]) for n, t in templates(wf).items() if "container" in t]
    for kind, replica in job_of(wf)["spec"]["pytorchReplicaSpecs"].items():
        containers += [(kind, c) for c in replica["template"]["spec"]["containers"]]
    for name in ("deploy", "rollback-apply"):  # the InferenceService's predictor
        (artifact,) = templates(wf)[name]["inputs"]["artifacts"]
        text = artifact["raw"]["data"]
        containers += [(name, c) for c in yaml.safe_load(text)["spec"]["predictor"]["containers"]]
    serving = ("deploy", "rollback-apply")
    assert len([c for c in containers if c[0] in serving]) == 2
    assert len(containers) >= 11  # the step containers, the Master and Worker, the predictors
    for where, container in containers:
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
        }
        user = (
            cfg.cluster.predictor_mlflow_secret if where in serving else cfg.cluster.mlflow_secret
        )
        for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            assert refs[name] == {"name": user, "key": name}, where  # no optional: true
        assert "MLFLOW_TRACKING_TOKEN" not in refs, where
        assert "optional" not in refs["AWS_ACCESS_KEY_ID"], where
