"""The pipeline's WorkflowTemplate and the Workflow and CronWorkflow that run it (a local
run executes the same pair): DAG, data flow, images, secrets, security, golden renders per
config, the strict schema check, the local runner's view, and RBAC.

Golden files: ``UPDATE_GOLDEN=1 pytest tests/test_flow.py tests/test_pytorchjob.py`` rewrites
tests/golden/ from the current code; review the diff before committing it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows import cifar
from flows.cifar import ROLLBACK_DEPENDS, build_cron_workflow, build_submission, build_template
from flows.cli import main as cli
from flows.errors import FlowError
from flows.local.expr.evaluate import environment, evaluate, render
from flows.manifests.shared_pod import config_args
from flows.pipeline.parameters import PARAMETERS, as_overrides, defaults
from flows.pipeline.train_templates import delete_when
from steps.common.config import ConfigError, PipelineConfig, load_config
from steps.common.config.loader import dump_config
from steps.common.version import package_version
from tests.helpers.flow_helpers import (
    CONFIGS,
    SECRETS,
    STEP_IMAGES,
    TRAIN_ARGS,
    VALIDATOR,
    check_golden,
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
def test_golden_renders(path: Path) -> None:
    cfg = load_config(path)
    docs = {
        "workflowtemplate": build_template(cfg),
        "workflow": build_submission(cfg),
        "cronworkflow": build_cron_workflow(cfg),
    }
    for kind, doc in docs.items():
        check_golden(f"{path.stem}-{kind}", doc.to_dict(), doc.to_yaml())


def picked(output: str, *tasks: str) -> str:
    """The expression that reads ``output`` of the first of ``tasks`` that Succeeded (a
    memo hit does), else of the last: how a step's outputs reach what reads them
    (flows/pipeline/reuse_templates.py), the run again's first."""
    expression = f"tasks['{tasks[-1]}'].outputs.parameters['{output}']"
    for task in reversed(tasks[:-1]):
        value = f"tasks['{task}'].outputs.parameters['{output}']"
        expression = f"(tasks['{task}'].status == 'Succeeded' ? {value} : {expression})"
    return expression


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_dag_order_and_data_flow(path: Path) -> None:
    """The DAG a run executes, with the parameters' defaults (one training task runs): each
    memoized step, the check of its memo hit and its run again
    (flows/pipeline/reuse_templates.py)."""
    wf = run_of(load_config(path))
    spec, t = wf["spec"], templates(wf)
    tasks = {task["name"]: task for task in t[spec["entrypoint"]]["dag"]["tasks"]}
    assert {n: task.get("depends") for n, task in tasks.items()} == {
        "create-run": None,
        "stage": None,
        "stage-reused": "stage && create-run",
        "stage-again": "stage-reused",
        "train": "create-run && stage && stage-again",
        "train-reused": "train",
        "train-again": "train-reused",
        "optimize": "train && train-again",
        "optimize-reused": "optimize",
        "optimize-again": "optimize-reused",
        "benchmark": "optimize && optimize-again",
        "benchmark-reused": "benchmark",
        "benchmark-again": "benchmark-reused",
        "deploy": "benchmark && benchmark-again",
        "serve-check": "deploy",
        # deploy is a transaction: a failed deploy rolls back as a failed check does
        "rollback-alias": ROLLBACK_DEPENDS,
        "rollback-apply": ROLLBACK_DEPENDS,
        "rollback-delete": ROLLBACK_DEPENDS,
    }
    trains = ("train", "train-multinode")  # one of them runs; its output is the one read
    decided = {
        "promoted": picked("promoted", "benchmark-again", "benchmark"),
        "previous": picked("previous-version", "benchmark-again", "benchmark"),
    }
    ran = {
        "stage": picked("workflow", "stage"),
        "train": picked("workflow", *trains),
        "optimize": picked("workflow", "optimize"),
        "benchmark": picked("workflow", "benchmark"),
    }
    assert {n: task.get("when") for n, task in tasks.items() if task.get("when")} == {
        # a hit handed on the outputs of another workflow: check them
        **{f"{step}-reused": f"{{{{={ran[step]} != workflow.name}}}}" for step in ran},
        # what it handed on is gone: run the step again
        **{
            f"{step}-again": f"'{{{{tasks.{step}-reused.outputs.parameters.gone}}}}' == 'true'"
            for step in ran
        },
        "deploy": f"{{{{={decided['promoted']}}}}} == true",
        "serve-check": f"{{{{={decided['promoted']}}}}} == true",
        "rollback-apply": f"'{{{{={decided['previous']}}}}}' != ''",
        "rollback-delete": f"'{{{{={decided['previous']}}}}}' == ''",
    }
    assert wf["metadata"]["generateName"] == "cifar-" and spec["onExit"] == "exit-handler"
    restored = "{{tasks.restore-champion.outputs.parameters.restore-service}}"
    restored_to = "{{tasks.restore-champion.outputs.parameters.previous-version}}"
    assert t["exit-handler"]["dag"]["tasks"] == [
        {"name": "close-run", "template": "close-run"},
        {
            "name": "delete-train-job",
            "template": "delete-train-job",
            "when": delete_when(),  # training itself did not succeed (tests/test_conformance_jobs)
        },
        # a stopped run restores the champion (tests/test_restore_champion.py)
        {
            "name": "restore-champion",
            "template": "restore-champion",
            "when": "{{workflow.status}} != Succeeded",
        },
        {
            "name": "restore-apply",
            "template": "rollback-apply",
            "depends": "restore-champion.Succeeded",
            "when": f"{restored} == true && '{restored_to}' != ''",
            "arguments": {
                "parameters": [
                    {"name": "previous-version", "value": restored_to},
                    {"name": "run-id", "value": "{{workflow.outputs.parameters.mlflow-run-id}}"},
                    {  # the image that serves it (a torch champion's is cifar-optimize)
                        "name": "previous-serving-image",
                        "value": "{{tasks.restore-champion.outputs.parameters."
                        "previous-serving-image}}",
                    },
                ]
            },
        },
        {
            "name": "restore-delete",
            "template": "rollback-delete",
            "depends": "restore-champion.Succeeded",
            "when": f"{restored} == true && '{restored_to}' == ''",
        },
    ]
    args = {
        n: {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
        for n, task in tasks.items()
        if "arguments" in task
    }
    root = load_config(path).storage.root_uri.rstrip("/")
    dataset = f"{{{{={picked('dataset-uri', 'stage-again', 'stage')}}}}}"
    model = f"{{{{={picked('model-uri', 'train-again', 'train-multinode-again', *trains)}}}}}"
    optimized = f"{{{{={picked('optimized', 'optimize-again', 'optimize')}}}}}"
    for name in ("train", "optimize", "benchmark"):
        assert args[name]["dataset-uri"] == dataset  # the staged data, here or reused
        assert args[name]["run-id"] == "{{tasks.create-run.outputs.parameters.run-id}}"
        assert args[f"{name}-again"] == {**args[name], "memo-max-age": "0s"}
    # where this run writes; what it reads: the outputs handed on, never recomputed
    assert args["train"]["model-uri"] == f"{root}/runs/{{{{workflow.name}}}}/model"
    assert args["optimize"]["model-uri"] == args["benchmark"]["model-uri"] == model
    assert args["optimize"]["optimized-uri"] == f"{root}/runs/{{{{workflow.name}}}}/optimized"
    assert args["benchmark"]["optimized-uri"] == optimized
    assert args["benchmark"]["output-uri"] == f"{root}/runs/{{{{workflow.name}}}}/benchmark"
    report = picked("report-uri", "benchmark-again", "benchmark")
    assert args["serve-check"]["benchmark-uri"] == f"{{{{={report}}}}}"
    version = f"{{{{={picked('model-version', 'benchmark-again', 'benchmark')}}}}}"
    assert args["deploy"]["model-version"] == args["rollback-alias"]["version"] == version
    # The predictor's image is the one the benchmark chose for the version, and for the one
    # a rollback re-applies (cifar-serve, or cifar-optimize for a torch champion).
    for task, image in (("deploy", "serving-image"), ("rollback-apply", "previous-serving-image")):
        assert args[task][image] == f"{{{{={picked(image, 'benchmark-again', 'benchmark')}}}}}"
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
        "workflow",  # the workflow that staged it (a hit: an earlier one)
    }


@pytest.mark.parametrize(
    ("overrides", "job"),
    [
        pytest.param([], "PyTorchJob", id="default"),
        pytest.param(["train.launcher=trainjob"], "TrainJob", id="trainjob"),
        pytest.param(["serving.enabled=false"], "PyTorchJob", id="no-serving"),
    ],
)
def test_the_description_annotation_is_the_dag(overrides: list[str], job: str) -> None:
    """The line the Argo UI shows under the workflow's name names the DAG it runs (it said
    ``train (PyTorchJob)`` for a TrainJob, and nothing of deploy, serve-check or the
    rollbacks): each task named is one the DAG holds, and each it holds is named."""
    wf = build_template(load_config(None, overrides)).to_dict()
    text = wf["metadata"]["annotations"]["workflows.argoproj.io/description"]
    tasks = {task["name"] for task in templates(wf)["pipeline"]["dag"]["tasks"]}
    assert f"train ({job})" in text
    for name in ("stage", "optimize", "benchmark", "deploy", "serve-check"):
        assert (name in text) == (name in tasks), (name, text)
    assert ("rolled back" in text) == ("rollback-alias" in tasks), text


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
        template = build_template(cfg).to_dict()
        for given in ({}, {"nodes": "3", "gpus-per-node": "2", "nproc-per-node": "2"}):
            files.append(tmp_path / f"{name}-job-{len(given)}.yaml")
            files[-1].write_text(yaml.safe_dump(job_of(template, **given)))
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text())]
    checked = validate(files)
    assert checked.endswith(f"{len(docs)} documents checked, 0 problems")
    # inside each WorkflowTemplate: its jobs and its two InferenceServices (deploy and
    # rollback-apply), their parameters filled with the defaults
    embedded = [
        t
        for d in docs
        if d["kind"] == "WorkflowTemplate"
        for t in d["spec"]["templates"]
        if "manifestFrom" in t.get("resource", {})
    ]
    assert f"({len(embedded)} job manifests from manifestFrom raw artifacts" in checked


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_local_runner_accepts_the_workflow(path: Path) -> None:
    """The submission joined with its WorkflowTemplate, as the local runner joins them."""
    checks = pytest.importorskip("flows.local.checks.fields")
    assert checks.unsupported(joined(load_config(path))) == []


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
