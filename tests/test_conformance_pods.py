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
from tests.conftest import REPO_ROOT
from tests.flow_helpers import CONFIGS, argo_substitute, job_of, parameter_values, templates


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


def test_the_mlflow_token_secret_is_optional() -> None:
    """configs/cluster.yaml names cluster.mlflow_secret; the MLflow server configs/cluster
    deploys wants no token, and docs/cluster.md creates the Secret only for a server that does. A
    required secretKeyRef to a missing Secret holds the pod in CreateContainerConfigError;
    an optional one leaves the variable unset. The S3 keys stay required."""
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml")
    wf = build_template(cfg).to_dict()
    containers = [(n, t["container"]) for n, t in templates(wf).items() if "container" in t]
    for kind, replica in job_of(wf)["spec"]["pytorchReplicaSpecs"].items():
        containers += [(kind, c) for c in replica["template"]["spec"]["containers"]]
    for name in ("deploy", "rollback-apply"):  # the InferenceService's predictor
        (artifact,) = templates(wf)[name]["inputs"]["artifacts"]
        text = artifact["raw"]["data"]
        containers += [(name, c) for c in yaml.safe_load(text)["spec"]["predictor"]["containers"]]
    # eight step containers (rollback-alias and reuse-check too), the Master and Worker, the
    # two predictors
    assert len(containers) == 12
    for where, container in containers:
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
        }
        assert refs["MLFLOW_TRACKING_TOKEN"] == {
            "name": cfg.cluster.mlflow_secret,
            "key": "MLFLOW_TRACKING_TOKEN",
            "optional": True,
        }, where
        assert "optional" not in refs["AWS_ACCESS_KEY_ID"], where
