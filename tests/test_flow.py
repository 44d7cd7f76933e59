"""The pipeline's WorkflowTemplate and the Workflow and CronWorkflow that run it (a local
run executes the same pair): DAG, data flow, golden renders per config, the schedule, the
strict schema check, the local runner's view, and RBAC (what each pod runs with:
tests/test_flow_pods.py).

Golden files: ``UPDATE_GOLDEN=1 pytest tests/test_flow.py tests/test_pytorchjob.py`` rewrites
tests/golden/ from the current code; review the diff before committing it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.cifar import ROLLBACK_DEPENDS, build_cron_workflow, build_submission, build_template
from flows.pipeline.train_templates import delete_when
from steps.common.config import load_config
from tests.helpers.flow_helpers import (
    CONFIGS,
    VALIDATOR,
    check_golden,
    job_of,
    joined,
    manifest,
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
