"""The pipeline's WorkflowTemplate, the Workflow and CronWorkflow that run it, and the
inline Workflow a local run executes: DAG, data flow, images, secrets, security, golden
renders per config, the strict schema check, the local runner's view, and RBAC.

Golden files: ``UPDATE_GOLDEN=1 pytest tests/test_flow.py tests/test_pytorchjob.py`` rewrites
tests/golden/ from the current code; review the diff before committing it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows import cli
from flows.cifar import (
    build_cron_workflow,
    build_submission,
    build_template,
    build_workflow,
    stage_cache_key,
)
from flows.manifests.names import FlowError
from flows.manifests.pod import config_args
from steps.common.config import ConfigError, load_config, package_version
from tests.conftest import REPO_ROOT, SHARED

CONFIGS = sorted((REPO_ROOT / "configs").glob("*.yaml"))
GOLDEN = REPO_ROOT / "tests" / "golden"
VALIDATOR = SHARED / "tools" / "validate_manifests.py"
STEP_IMAGES = {
    "create-run": "train",
    "stage": "data",
    "optimize": "optimize",
    "benchmark": "optimize",
    "serve-check": "serve",
    "close-run": "train",
}
SECRETS = {  # sentinel values that must never reach a render or a request
    "AWS_ACCESS_KEY_ID": "AKIA-SENTINEL-0001",
    "AWS_SECRET_ACCESS_KEY": "sentinel-secret-key-0002",
    "MLFLOW_TRACKING_TOKEN": "sentinel-mlflow-token-0003",
    "ARGO_TOKEN": "sentinel-argo-token-0004",
}


def check_golden(name: str, data: dict[str, Any], text: str | None = None) -> None:
    """Compare data (not text) with tests/golden/NAME.yaml; UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text or yaml.safe_dump(data, sort_keys=False))
    assert path.is_file(), f"{path} missing: run UPDATE_GOLDEN=1 pytest {__file__}"
    assert data == yaml.safe_load(path.read_text()), f"{path.name} differs (UPDATE_GOLDEN=1)"


FORMS = ["inline", "template"]


def manifest(cfg_path: Path, *overrides: str, form: str = "inline") -> dict[str, Any]:
    """The inline Workflow (a local run) or the WorkflowTemplate (a cluster run)."""
    cfg = load_config(cfg_path, list(overrides))
    return (build_template(cfg) if form == "template" else build_workflow(cfg)).to_dict()


def templates(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = wf["spec"].get("workflowSpec", wf["spec"])
    return {t["name"]: t for t in spec["templates"]}


PARAMETER = re.compile(r"\{\{workflow\.parameters\.([a-z-]+)\}\}")
WORKERS = "{{=asInt(workflow.parameters.nodes) - 1}}"


def argo_substitute(text: str, values: dict[str, str]) -> str:
    """What Argo does to the template's text with these parameter values, for the forms
    the pipeline uses; any other expression fails the test."""
    text = text.replace(WORKERS, str(int(values["nodes"]) - 1))
    text = PARAMETER.sub(lambda match: values[match.group(1)], text)
    assert "{{workflow.parameters" not in text and "asInt(" not in text, text
    return text


def parameter_values(wf: dict[str, Any], **given: str) -> dict[str, str]:
    values = {p["name"]: p["value"] for p in wf["spec"]["arguments"]["parameters"]}
    return {**values, **given}


WHEN = re.compile(r"\s*(\d+)\s*(<=|>)\s*(\d+)\s*")


def when_holds(condition: str) -> bool:
    """The two forms of ``when`` the pipeline uses, as govaluate decides them."""
    match = WHEN.fullmatch(condition)
    assert match, condition
    left, op, right = int(match.group(1)), match.group(2), int(match.group(3))
    return left <= right if op == "<=" else left > right


def train_tasks(wf: dict[str, Any]) -> list[dict[str, Any]]:
    spec = wf["spec"].get("workflowSpec", wf["spec"])
    dag = next(t for t in spec["templates"] if t["name"] == spec["entrypoint"])["dag"]
    return [t for t in dag["tasks"] if t["template"].startswith("train")]


def train_template_of(wf: dict[str, Any], **given: str) -> dict[str, Any]:
    """The training template that runs with these parameters: the task whose ``when``
    holds (exactly one; a task without ``when`` always runs)."""
    values = parameter_values(wf, **given) if "arguments" in wf["spec"] else {}
    running = [
        t
        for t in train_tasks(wf)
        if "when" not in t or when_holds(argo_substitute(t["when"], values))
    ]
    assert len(running) == 1, running
    return templates(wf)[running[0]["template"]]


def job_of(wf: dict[str, Any], **given: str) -> dict[str, Any]:
    """The training job, as the API server gets it: a WorkflowTemplate's manifest is its
    raw input artifact with the parameters (defaults, or ``given``) substituted."""
    train = train_template_of(wf, **given)
    if "manifest" in train["resource"]:
        return yaml.safe_load(train["resource"]["manifest"])
    assert train["resource"]["manifestFrom"] == {"artifact": {"name": "manifest"}}
    (artifact,) = train["inputs"]["artifacts"]
    text = argo_substitute(artifact["raw"]["data"], parameter_values(wf, **given))
    return yaml.safe_load(text)


def pods(wf: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None, dict[str, Any]]]:
    """(where, pod securityContext, container) for every pod the workflow starts."""
    pod_ctx = wf["spec"].get("securityContext")
    found = [(n, pod_ctx, t["container"]) for n, t in templates(wf).items() if "container" in t]
    for kind, replica in job_of(wf)["spec"]["pytorchReplicaSpecs"].items():
        spec = replica["template"]["spec"]
        found += [(f"train/{kind}", spec.get("securityContext"), c) for c in spec["containers"]]
    for name in ("deploy", "rollback-apply"):  # the InferenceService's predictor pods
        resource = templates(wf)[name]["resource"]
        if "manifest" in resource:
            text = resource["manifest"]
        else:
            (artifact,) = templates(wf)[name]["inputs"]["artifacts"]
            text = artifact["raw"]["data"]
        predictor = yaml.safe_load(text)["spec"]["predictor"]
        found += [(name, predictor.get("securityContext"), c) for c in predictor["containers"]]
    return found


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_golden_renders(path: Path) -> None:
    cfg = load_config(path)
    docs = {
        "workflowtemplate": build_template(cfg),
        "workflow": build_submission(cfg),
        "cronworkflow": build_cron_workflow(cfg),
        "inline-workflow": build_workflow(cfg),
    }
    for kind, doc in docs.items():
        check_golden(f"{path.stem}-{kind}", doc.to_dict(), doc.to_yaml())


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_dag_order_and_data_flow(path: Path) -> None:
    wf = manifest(path)
    spec, t = wf["spec"], templates(wf)
    tasks = {task["name"]: task for task in t[spec["entrypoint"]]["dag"]["tasks"]}
    assert {n: task.get("depends") for n, task in tasks.items()} == {
        "create-run": None,
        "stage": None,
        "train": "create-run && stage",
        "optimize": "train",
        "benchmark": "optimize",
        "deploy": "benchmark",
        "serve-check": "deploy",
        "rollback-apply": "serve-check.Failed",
        "rollback-delete": "serve-check.Failed",
    }
    promoted = "{{tasks.benchmark.outputs.parameters.promoted}} == true"
    previous = "'{{tasks.benchmark.outputs.parameters.previous-version}}'"
    assert {n: task.get("when") for n, task in tasks.items() if task.get("when")} == {
        "deploy": promoted,
        "serve-check": promoted,
        "rollback-apply": f"{previous} != ''",
        "rollback-delete": f"{previous} == ''",
    }
    assert wf["metadata"]["generateName"] == "cifar-" and spec["onExit"] == "exit-handler"
    assert t["exit-handler"]["dag"]["tasks"] == [
        {"name": "close-run", "template": "close-run"},
        {
            "name": "delete-train-job",
            "template": "delete-train-job",
            "when": "{{workflow.status}} != Succeeded",
        },
    ]
    args = {
        n: {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
        for n, task in tasks.items()
        if "arguments" in task
    }
    root = load_config(path).storage.root_uri.rstrip("/")
    for name in ("train", "optimize", "benchmark"):
        assert args[name]["dataset-uri"] == "{{tasks.stage.outputs.parameters.dataset-uri}}"
        assert args[name]["run-id"] == "{{tasks.create-run.outputs.parameters.run-id}}"
        assert args[name]["model-uri"] == f"{root}/runs/{{{{workflow.name}}}}/model"
    assert args["benchmark"]["optimized-uri"] == args["optimize"]["optimized-uri"]
    run_id = t["create-run"]["outputs"]["parameters"][0]
    assert (run_id["globalName"], run_id["valueFrom"]["path"]) == (
        "mlflow-run-id",
        "/tmp/outputs/run_id",
    )
    close = t["close-run"]["container"]["args"]
    assert close[:5] == [
        "end",
        "--run-id",
        "{{workflow.outputs.parameters.mlflow-run-id}}",
        "--status",
        "{{workflow.status}}",
    ]
    ui = load_config(path).cluster.argo_ui_url
    link = f"{ui}/workflows/{{{{workflow.namespace}}}}/{{{{workflow.name}}}}" if ui else None
    assert (close[6] if close[5:6] == ["--argo-url"] else None) == link
    assert {a["name"]: a["path"] for a in t["benchmark"]["outputs"]["artifacts"]} == {
        "report": "/tmp/outputs/report.md",
        "benchmark": "/tmp/outputs/benchmark.json",
    }
    assert {p["name"] for p in t["stage"]["outputs"]["parameters"]} == {
        "dataset-uri",
        "digest",
        "num-train",
        "num-test",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_image_carries_the_configured_version(path: Path) -> None:
    wf, cfg = manifest(path), load_config(path)
    assert cfg.images.tag == package_version()
    images = {n: t["container"]["image"] for n, t in templates(wf).items() if "container" in t}
    assert images == {n: cfg.images.image(step) for n, step in STEP_IMAGES.items()}  # type: ignore[arg-type]
    job_images = {c["image"] for _, _, c in pods(wf)}
    assert all(i.endswith(f":{cfg.images.tag}") and not i.endswith(":latest") for i in job_images)


def test_latest_tag_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--set images\.tag=latest: images\.tag: .*not 'latest'"):
        load_config(REPO_ROOT / "configs" / "smoke.yaml", ["images.tag=latest"])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
@pytest.mark.parametrize("form", FORMS)
def test_train_is_a_pytorchjob_that_fails_the_step_when_it_fails(path: Path, form: str) -> None:
    """The conditions as text; what they decide on the operator's statuses is in
    tests/test_conformance_jobs.py."""
    train = templates(manifest(path, form=form))["train"]
    resource = train["resource"]
    # owned through the manifest (OWNER): Argo's flag would not reach a manifestFrom job
    assert resource["action"] == "create" and "setOwnerReference" not in resource
    assert resource["successCondition"] == "status.replicaStatuses.Master.succeeded > 0"
    assert resource["failureCondition"] == ", ".join(
        f"status.conditions.{i}.type == Failed" for i in range(4)
    )
    assert train["outputs"]["parameters"] == [
        {"name": "job-name", "valueFrom": {"jsonPath": "{.metadata.name}"}}
    ]
    job = job_of(manifest(path, form=form))
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["torchrun"]
    assert container["args"][:8] == [
        "-m",
        "steps.train",
        "--dataset",
        "{{inputs.parameters.dataset-uri}}",
        "--output",
        "{{inputs.parameters.model-uri}}",
        "--mlflow-run-id",
        "{{inputs.parameters.run-id}}",
    ]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
@pytest.mark.parametrize("form", FORMS)
def test_every_pod_runs_as_non_root_without_capabilities(path: Path, form: str) -> None:
    wf = manifest(path, form=form)
    found = pods(wf)
    # six steps, the job's replicas, the InferenceService of deploy and of rollback-apply
    assert len(found) == 6 + len(job_of(wf)["spec"]["pytorchReplicaSpecs"]) + 2
    for where, pod_ctx, container in found:
        ctx = container["securityContext"]
        assert pod_ctx and pod_ctx["runAsNonRoot"] and pod_ctx["runAsUser"] > 0, where
        assert ctx["allowPrivilegeEscalation"] is False and ctx["runAsNonRoot"], where
        assert ctx["capabilities"] == {"drop": ["ALL"]}, where


def test_rdma_is_refused_naming_the_field() -> None:
    """IPC_LOCK added to a container that runs as a non-root uid is not in its effective
    set (kubernetes/kubernetes#56374), and every pod runs as cluster.run_as_user >= 1: the
    capability would pin no memory, so the config refuses cluster.rdma rather than render
    a capability that does nothing."""
    with pytest.raises(ConfigError, match=r"cluster\.rdma: IPC_LOCK has no effect .*56374"):
        load_config(REPO_ROOT / "configs" / "cluster.yaml", ["cluster.rdma=true"])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_secrets_only_by_reference(path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["--config", str(path), "--render"]) == 0
    text = capsys.readouterr().out
    assert not [v for v in SECRETS.values() if v in text]
    text = yaml.safe_dump(next(yaml.safe_load_all(text)))  # the WorkflowTemplate
    c = load_config(path).cluster
    wanted = {"AWS_ACCESS_KEY_ID": c.s3_secret, "AWS_SECRET_ACCESS_KEY": c.s3_secret}
    wanted = wanted if "s3://" in text else {}  # S3 keys only where some URI is s3://
    wanted |= {"MLFLOW_TRACKING_TOKEN": c.mlflow_secret} if c.mlflow_secret else {}
    for where, _, container in pods(yaml.safe_load(text)):
        secret_env = {
            env["name"]: env["valueFrom"]["secretKeyRef"]
            for env in container.get("env", [])
            if re.search(r"SECRET|TOKEN|PASSWORD|ACCESS_KEY", env["name"])
        }
        assert {k: ref["name"] for k, ref in secret_env.items()} == wanted, where
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
    cfg = load_config(REPO_ROOT / "configs" / "local.yaml", overrides)
    assert config_args(cfg) == expected
    stage = templates(build_workflow(cfg).to_dict())["stage"]["container"]["args"]
    assert (
        stage[len(stage) - len(expected) :] == expected
        and stage.count("--set") == len(expected) // 2
    )


@pytest.mark.parametrize("value", ["'[x]'", "'null'"], ids=["looks-like-a-list", "null"])
def test_config_that_cannot_travel_as_set_is_refused(value: str, tmp_path: Path) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(f"benchmark:\n  registered_model: {value}\n")
    with pytest.raises(FlowError, match=r"benchmark\.registered_model.* does not survive --set"):
        config_args(load_config(path))


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
    smoke = REPO_ROOT / "configs" / "smoke.yaml"
    base, other = (
        stage_cache_key(load_config(smoke)),
        stage_cache_key(load_config(smoke, [override])),
    )
    assert re.fullmatch(r"[a-zA-Z0-9][-a-zA-Z0-9]*", other)  # Argo's rule for cache keys
    assert (base != other) is changes


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_cron_workflow_runs_the_template_on_schedule(path: Path) -> None:
    cfg = load_config(path)
    cron, template = build_cron_workflow(cfg).to_dict(), build_template(cfg).to_dict()
    spec = cron["spec"]
    assert spec.pop("workflowSpec") == {
        "workflowTemplateRef": {"name": "cifar-pipeline"},
        "workflowMetadata": template["spec"]["workflowMetadata"],  # labels of each run
    }
    assert template["spec"]["workflowMetadata"] == {
        "labels": template["metadata"]["labels"],
        "annotations": template["metadata"]["annotations"],
    }
    s = cfg.schedule
    assert spec == {
        "schedules": [s.cron],
        "timezone": s.timezone,
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": s.starting_deadline_seconds,
        "successfulJobsHistoryLimit": s.successful_history_limit,
        "failedJobsHistoryLimit": s.failed_history_limit,
    }
    assert cron["metadata"]["name"] == s.name


VARIANT = [
    "cluster.nodes=4",
    "cluster.elastic_min_nodes=2",
    "cluster.pvc=cifar-data",
    "cluster.scheduler_name=volcano",
    "cluster.queue=training",
    "storage.root_uri=file:///mnt/cifar/artifacts",
]


def validate(files: list[Path]) -> str:
    done = subprocess.run(
        [sys.executable, str(VALIDATOR), *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not VALIDATOR.is_file(), reason="../shared (the schema validator) is absent")
def test_every_render_passes_the_strict_schema_check(tmp_path: Path) -> None:
    """Every document --render prints, and the job each template creates with its default
    parameters and with others (the validator cannot see inside a raw artifact)."""
    files: list[Path] = []
    configs = [(p.stem, load_config(p)) for p in CONFIGS]
    configs.append(("variant", load_config(REPO_ROOT / "configs" / "cluster.yaml", VARIANT)))
    for name, cfg in configs:
        for cron in (False, True):
            files.append(tmp_path / f"{name}-{'cron' if cron else 'wf'}.yaml")
            docs = [
                build_template(cfg),
                build_cron_workflow(cfg) if cron else build_submission(cfg),
            ]
            files[-1].write_text("---\n".join(d.to_yaml() for d in docs))
        files.append(tmp_path / f"{name}-inline.yaml")
        files[-1].write_text(build_workflow(cfg).to_yaml())
        template = build_template(cfg).to_dict()
        for given in ({}, {"nodes": "3", "gpus-per-node": "2", "nproc-per-node": "2"}):
            files.append(tmp_path / f"{name}-job-{len(given)}.yaml")
            files[-1].write_text(yaml.safe_dump(job_of(template, **given)))
    documents = sum(len(list(yaml.safe_load_all(f.read_text()))) for f in files)
    # each inline workflow's embedded PyTorchJob and its two InferenceServices (deploy and
    # rollback-apply), checked too
    documents += 3 * len(configs)
    assert validate(files).endswith(f"{documents} documents checked, 0 problems")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_local_runner_accepts_the_workflow(path: Path) -> None:
    checks = pytest.importorskip("flows.local.checks.fields")
    assert checks.unsupported(manifest(path)) == []


def test_the_workflows_account_and_cache_are_the_configs() -> None:
    """The names configs/cluster/pipeline creates are the ones the cluster config uses; what
    the account may do is computed from the rendered workflow and held exactly in
    tests/test_conformance_cluster.py (test_the_workflow_account_has_nothing_more)."""
    docs = [
        d
        for d in yaml.safe_load_all((REPO_ROOT / "configs/cluster/pipeline/rbac.yaml").read_text())
        if d
    ]
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"ServiceAccount", "Role", "RoleBinding"}
    c = load_config(REPO_ROOT / "configs" / "cluster.yaml").cluster
    assert by_kind["ServiceAccount"]["metadata"]["name"] == c.service_account
    binding = by_kind["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": by_kind["Role"]["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": c.service_account}]
    cache = yaml.safe_load((REPO_ROOT / "configs/cluster/pipeline/memoize-cache.yaml").read_text())
    assert cache["metadata"]["name"] == c.cache_configmap
    assert cache["metadata"]["labels"]["workflows.argoproj.io/configmap-type"] == "Cache"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_outputs_dir_holds_a_declared_output(path: Path) -> None:
    """A local run moves only declared output paths and a directory named whole that holds
    them (flows/local/output_paths.py): a step given ``--outputs-dir`` with nothing declared
    under it would write to this machine's real /tmp/outputs."""
    for name, t in templates(manifest(path)).items():
        args = t.get("container", {}).get("args", [])
        if "--outputs-dir" not in args:
            continue
        folder = args[args.index("--outputs-dir") + 1]
        outputs = t.get("outputs", {})
        paths = [p["valueFrom"]["path"] for p in outputs.get("parameters", [])]
        paths += [a["path"] for a in outputs.get("artifacts", [])]
        assert any(p.startswith(f"{folder}/") for p in paths), name
