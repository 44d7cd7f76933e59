"""What every pod of the rendered pipeline runs with: the configured version's images (never
latest), the training job failing its step, non-root without capabilities, Secrets by
reference only, RDMA only with NCCL's environment, the config as --set arguments (refused
where a value cannot travel so), the staging cache key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from flows import cifar
from flows.cli import main as cli
from flows.errors import FlowError
from flows.local.expr.evaluate import environment, evaluate, render
from flows.manifests.shared_pod import config_args
from flows.pipeline.parameters import PARAMETERS, as_overrides, defaults
from steps.common.config import ConfigError, PipelineConfig, load_config
from steps.common.config.loader import dump_config
from steps.common.version import package_version
from tests.helpers.flow_helpers import (
    CONFIGS,
    SECRETS,
    STEP_IMAGES,
    TRAIN_ARGS,
    job_of,
    joined,
    manifest,
    parameter_values,
    pods,
    run_of,
    templates,
)
from tests.helpers.paths import REPO_ROOT


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_image_carries_the_configured_version(path: Path) -> None:
    wf, cfg = manifest(path), load_config(path)
    assert cfg.images.tag == package_version()
    images = {n: t["container"]["image"] for n, t in templates(wf).items() if "container" in t}
    assert images == {n: cfg.images.image(step) for n, step in STEP_IMAGES.items()}  # type: ignore[arg-type]
    # The predictor's image is a parameter, the benchmark's choice for the version served:
    # one of cfg.images' (steps/benchmark/registered_model.py SERVED_BY; its tests read it).
    chosen = {"deploy": "serving-image", "rollback-apply": "previous-serving-image"}
    predictors = {w: c["image"] for w, _, c in pods(wf) if w in chosen}
    assert predictors == {w: f"{{{{inputs.parameters.{p}}}}}" for w, p in chosen.items()}
    job_images = {c["image"] for w, _, c in pods(wf) if w not in chosen}
    assert all(i.endswith(f":{cfg.images.tag}") and not i.endswith(":latest") for i in job_images)


def test_latest_tag_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--set images\.tag=latest: images\.tag: .*not 'latest'"):
        load_config(REPO_ROOT / "configs" / "smoke.yaml", ["images.tag=latest"])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_train_is_a_pytorchjob_that_fails_the_step_when_it_fails(path: Path) -> None:
    """The conditions as text; what they decide on the operator's statuses is in
    tests/test_conformance_jobs.py."""
    train = templates(manifest(path))["train"]
    resource = train["resource"]
    # owned through the manifest (OWNER): Argo's flag would not reach a manifestFrom job
    assert resource["action"] == "create" and "setOwnerReference" not in resource
    assert resource["successCondition"] == "status.replicaStatuses.Master.succeeded > 0"
    assert resource["failureCondition"] == ", ".join(
        f"status.conditions.{i}.type == Failed" for i in range(4)
    )
    # the job's name, and what the job says of its run (its memo entry:
    # flows/pipeline/train_templates.py)
    assert train["outputs"]["parameters"] == [
        {"name": "job-name", "valueFrom": {"jsonPath": "{.metadata.name}"}},
        *(
            {"name": n, "valueFrom": {"jsonPath": f"{{.metadata.annotations.cifar-pipeline/{n}}}"}}
            for n in ("model-uri", "mlflow-run-id", "workflow")
        ),
    ]
    job = job_of(manifest(path))
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["torchrun"]
    assert container["args"][:8] == TRAIN_ARGS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_pod_runs_as_non_root_without_capabilities(path: Path) -> None:
    wf = manifest(path)
    found = pods(wf)
    # nine steps (rollback-alias, reuse-check and the exit handler's restore-champion too),
    # the job's replicas, the InferenceService of deploy and of rollback-apply
    assert len(found) == 9 + len(job_of(wf)["spec"]["pytorchReplicaSpecs"]) + 2
    for where, pod_ctx, container in found:
        ctx = container["securityContext"]
        assert pod_ctx and pod_ctx["runAsNonRoot"] and pod_ctx["runAsUser"] > 0, where
        assert ctx["allowPrivilegeEscalation"] is False and ctx["runAsNonRoot"], where
        assert ctx["capabilities"] == {"drop": ["ALL"]}, where


def test_rdma_is_refused_only_against_nccl_env_naming_the_fields() -> None:
    """Issue 30 changed this: cluster.rdma renders RDMA as seed 004 runs it
    (flows/manifests/network.py; tests/test_pytorchjob.py and test_trainjob.py), where it
    was refused for kubernetes#56374. It is refused where the config contradicts it."""
    load_config(REPO_ROOT / "configs" / "cluster.yaml", ["cluster.rdma=true"])
    with pytest.raises(ConfigError, match=r"rdma is true and nccl_env sets NCCL_IB_DISABLE=1"):
        load_config(
            REPO_ROOT / "configs" / "cluster.yaml",
            ["cluster.rdma=true", 'cluster.nccl_env={"NCCL_IB_DISABLE":"1"}'],
        )


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_secrets_only_by_reference(path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["--config", str(path), "--render"], cifar) == 0
    text = capsys.readouterr().out
    assert not [v for v in SECRETS.values() if v in text]
    text = yaml.safe_dump(next(yaml.safe_load_all(text)))  # the WorkflowTemplate
    c = load_config(path).cluster

    def wanted(s3: str, mlflow: str | None) -> dict[str, str]:
        found = {"AWS_ACCESS_KEY_ID": s3, "AWS_SECRET_ACCESS_KEY": s3}
        found = found if "s3://" in text else {}  # S3 keys only where some URI is s3://
        users = {"MLFLOW_TRACKING_USERNAME": mlflow, "MLFLOW_TRACKING_PASSWORD": mlflow}
        return found | (users if mlflow else {})

    steps = wanted(c.s3_secret, c.mlflow_secret)
    predictor = wanted(c.predictor_s3_secret, c.predictor_mlflow_secret)  # its own, read-only
    for where, _, container in pods(yaml.safe_load(text)):
        secret_env = {
            env["name"]: env["valueFrom"]["secretKeyRef"]
            for env in container.get("env", [])
            if re.search(r"SECRET|TOKEN|PASSWORD|USERNAME|ACCESS_KEY", env["name"])
        }
        serves = where in ("deploy", "rollback-apply")
        assert {k: ref["name"] for k, ref in secret_env.items()} == (
            predictor if serves else steps
        ), where
        assert all(ref["key"] == name for name, ref in secret_env.items()), where


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param([], [], id="defaults-add-nothing"),
        pytest.param(["train.epochs=3"], ["--set", "train.epochs=3"], id="scalar"),
        pytest.param(
            ["benchmark.batch_sizes=[1, 32]"], ["--set", "benchmark.batch_sizes=[1,32]"], id="list"
        ),
        pytest.param(
            ["train.target_accuracy=0.9", "tracking.enabled=false"],
            ["--set", "train.target_accuracy=0.9", "--set", "tracking.enabled=false"],
            id="two-sections",
        ),
        pytest.param(
            ["cluster.nodes=4", "images.pull_policy=Always"],
            ["--set", "cluster.nodes=4"],
            id="cluster-yes-images-no",
        ),
    ],
)
def test_config_reaches_steps_as_set_arguments(overrides: list[str], expected: list[str]) -> None:
    """Every step gets the config's own ``--set`` arguments, a parameter's field as its
    ``{{workflow.parameters.x}}``: with the defaults filled in, the stage step rebuilds
    exactly the config those arguments and the parameters' values give (``auto``
    processes per node is a number there)."""
    cfg = load_config(REPO_ROOT / "configs" / "local.yaml", overrides)
    assert config_args(cfg) == expected
    stage = templates(run_of(cfg))["stage"]["container"]["args"]
    sets = [stage[i + 1] for i, arg in enumerate(stage) if arg == "--set"]
    fields = {p.field for p in PARAMETERS}
    own = [s for s in sets if s.split("=", 1)[0] not in fields]
    assert own == [s for s in expected[1::2] if s.split("=", 1)[0] not in fields]
    assert set(expected[1::2]) <= set(sets)
    wanted = load_config(None, [*expected[1::2], *as_overrides(defaults(cfg))])
    assert dump_config(load_config(None, sets)) == dump_config(wanted)


@pytest.mark.parametrize("value", ["'[x]'", "'null'"], ids=["looks-like-a-list", "null"])
def test_config_that_cannot_travel_as_set_is_refused(value: str, tmp_path: Path) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(f"benchmark:\n  registered_model: {value}\n")
    with pytest.raises(FlowError, match=r"benchmark\.registered_model.* does not survive --set"):
        config_args(load_config(path))


def stage_cache_key(cfg: PipelineConfig) -> str:
    """The stage step's memoization key in a run with the parameters' defaults."""
    wf = joined(cfg)
    scope = {f"workflow.parameters.{k}": v for k, v in parameter_values(wf).items()}
    key = templates(wf)["stage"]["memoize"]["key"]
    return re.sub(r"\{\{=(.*?)\}\}", lambda m: render(evaluate(m[1], environment(scope))), key)


@pytest.mark.parametrize(
    ("override", "changes"),
    [
        pytest.param("train.epochs=3", False, id="training-field"),
        pytest.param("data.source=synthetic:100", True, id="source"),
        pytest.param("data.md5=none", True, id="md5"),
        pytest.param("storage.root_uri=s3://other", True, id="root"),
        pytest.param("images.tag=0.2.0", True, id="version"),
    ],
)
def test_stage_cache_key_follows_source_and_version(override: str, changes: bool) -> None:
    """The key Argo computes for a run with the parameters' defaults: its ``{{=...}}``
    (the ``data-source`` parameter hashed) evaluated as Argo's controller evaluates it."""
    smoke = REPO_ROOT / "configs" / "smoke.yaml"
    base, other = (
        stage_cache_key(load_config(smoke)),
        stage_cache_key(load_config(smoke, [override])),
    )
    assert re.fullmatch(r"[a-zA-Z0-9][-a-zA-Z0-9]*", other)  # Argo's rule for cache keys
    assert (base != other) is changes
