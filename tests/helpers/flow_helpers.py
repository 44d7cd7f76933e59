"""What the render tests share: the configs, the strict schema validator, the pipeline's
Workflow as Argo runs it (parameters substituted, ``when`` decided), its training job, the
golden files (the job's checks: tests/helpers/job_checks.py). Golden files:
``UPDATE_GOLDEN=1 pytest tests/test_flow.py tests/test_pytorchjob.py`` rewrites tests/golden/
from the current code; review the diff before committing it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from flows.cifar import build_submission, build_template
from flows.local.template_ref import resolve
from flows.manifests import pytorchjob, trainjob
from flows.manifests.shared_pod import config_args, pod_env
from flows.pipeline.train_templates import OWNER, job_annotations, job_labels
from steps.common.config import PipelineConfig, load_config
from tests.helpers.paths import REPO_ROOT, SHARED

CONFIGS = sorted((REPO_ROOT / "configs").glob("*.yaml"))
GOLDEN = REPO_ROOT / "tests" / "golden"
VALIDATOR = SHARED / "tools" / "validate_manifests.py"
STEP_IMAGES = {
    "create-run": "train",
    "stage": "data",
    "optimize": "optimize",
    "benchmark": "optimize",
    "serve-check": "serve",
    "rollback-alias": "serve",
    "close-run": "train",
    "reuse-check": "train",  # the check of a memo hit (flows/pipeline/reuse_templates.py)
    "restore-champion": "serve",
}
SECRETS = {  # sentinel values that must never reach a render or a request
    "AWS_ACCESS_KEY_ID": "AKIA-SENTINEL-0001",
    "AWS_SECRET_ACCESS_KEY": "sentinel-secret-key-0002",
    "MLFLOW_TRACKING_TOKEN": "sentinel-mlflow-token-0003",
    "MLFLOW_TRACKING_USERNAME": "sentinel-mlflow-user-0005",
    "MLFLOW_TRACKING_PASSWORD": "sentinel-mlflow-password-0006",
    "ARGO_TOKEN": "sentinel-argo-token-0004",
}


def check_golden(name: str, data: dict[str, Any], text: str | None = None) -> None:
    """Compare data (not text) with tests/golden/NAME.yaml; UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text or yaml.safe_dump(data, sort_keys=False))
    assert path.is_file(), (
        f"{path} missing: run UPDATE_GOLDEN=1 pytest tests/test_flow.py tests/test_pytorchjob.py"
    )
    assert data == yaml.safe_load(path.read_text()), f"{path.name} differs (UPDATE_GOLDEN=1)"


def manifest(cfg_path: Path, *overrides: str) -> dict[str, Any]:
    """The WorkflowTemplate, as rendered (its parameters unfilled)."""
    return build_template(load_config(cfg_path, list(overrides))).to_dict()


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
    # a tag asInt of another form is left: fail (a retryStrategy.expression's bare asInt is
    # the controller's to evaluate, not substituted text)
    assert "{{workflow.parameters" not in text and "{{=asInt(" not in text, text
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
    """The DAG's training tasks, one per training template (not the runs again after a
    dead memo hit, flows/pipeline/reuse_templates.py: they run the same templates)."""
    spec = wf["spec"].get("workflowSpec", wf["spec"])
    dag = next(t for t in spec["templates"] if t["name"] == spec["entrypoint"])["dag"]
    return [
        t for t in dag["tasks"] if t["template"].startswith("train") and t["name"] == t["template"]
    ]


def _on_tasks(condition: str) -> bool:
    """A ``when`` on tasks' outputs (a tag, or an expression's ``tasks[...]``)."""
    return "{{tasks." in condition or "tasks[" in condition


def decide_whens(spec: dict[str, Any]) -> None:
    """Drop the tasks whose ``when`` on the workflow's parameters is false (Argo skips
    them; a plain dependency on a Skipped task holds) and their templates; the training
    template that runs is then named ``train``. A ``when`` on a task's outputs (deploy's,
    on the benchmark's decision) is decided at run time and stays; of one joined by
    ``&&`` with a condition on the parameters (a training task run again), that condition
    is decided now."""
    found = {t["name"]: t for t in spec["templates"]}
    dag = found[spec["entrypoint"]]["dag"]
    skipped: set[str] = set()
    for task in dag["tasks"]:
        if "when" not in task:
            continue
        conditions = task["when"].split(" && ")
        decided = [c for c in conditions if not _on_tasks(c)]
        if not all(when_holds(c) for c in decided):
            skipped.add(task["name"])
        kept = [c for c in conditions if _on_tasks(c)]
        if kept:
            task["when"] = " && ".join(kept)
        else:
            task.pop("when")
    dag["tasks"] = [t for t in dag["tasks"] if t["name"] not in skipped]
    for task in dag["tasks"]:
        if "depends" in task:
            names = [n.strip() for n in task["depends"].split("&&")]
            task["depends"] = " && ".join(n for n in names if n not in skipped)
    used = {t["template"] for t in dag["tasks"]}
    for name in skipped - used:
        found.pop(name, None)  # a skipped training template (a task run again is none)
    if "train-multinode" in found:
        found["train"] = {**found.pop("train-multinode"), "name": "train"}
        for task in dag["tasks"]:
            for key in ("name", "template", "depends"):
                if key in task:
                    task[key] = re.sub(r"\btrain-multinode\b", "train", task[key])
    spec["templates"] = list(found.values())


def filled(node: Any, values: dict[str, str]) -> Any:
    """Every string in ``node`` with the parameters substituted (``argo_substitute``)."""
    if isinstance(node, dict):
        return {k: filled(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [filled(v, values) for v in node]
    return argo_substitute(node, values) if isinstance(node, str) else node


def joined(cfg: PipelineConfig, values: dict[str, str] | None = None) -> dict[str, Any]:
    """The Workflow a run executes: the submission joined with the WorkflowTemplate it
    names, as Argo's controller (and the local runner) joins them."""
    template = build_template(cfg).to_dict()
    return resolve(build_submission(cfg, values).to_dict(), [template], values)


def run_of(cfg: PipelineConfig, **given: str) -> dict[str, Any]:
    """That Workflow with concrete values, as Argo runs it: the parameters (defaults, or
    ``given``) substituted everywhere, the ``when`` on them decided (``decide_whens``)."""
    wf = joined(cfg, given or None)
    wf = filled(wf, parameter_values(wf))
    decide_whens(wf["spec"])
    return wf


def train_template_of(wf: dict[str, Any], **given: str) -> dict[str, Any]:
    """The training template that runs with these parameters: the task whose ``when``
    holds (exactly one; a task without ``when`` always runs)."""
    values = parameter_values(wf, **given)
    running = [
        t
        for t in train_tasks(wf)
        if "when" not in t or when_holds(argo_substitute(t["when"], values))
    ]
    assert len(running) == 1, running
    return templates(wf)[running[0]["template"]]


def job_of(wf: dict[str, Any], **given: str) -> dict[str, Any]:
    """The training job, as the API server gets it: the manifest is the train template's
    raw input artifact with the parameters (defaults, or ``given``) substituted."""
    train = train_template_of(wf, **given)
    assert train["resource"]["manifestFrom"] == {"artifact": {"name": "manifest"}}
    (artifact,) = train["inputs"]["artifacts"]
    text = argo_substitute(artifact["raw"]["data"], parameter_values(wf, **given))
    return yaml.safe_load(text)


TRAIN_ARGS = [  # the train step's own arguments, before the config's
    "-m",
    "steps.train",
    "--dataset",
    "{{inputs.parameters.dataset-uri}}",
    "--output",
    "{{inputs.parameters.model-uri}}",
    "--mlflow-run-id",
    "{{inputs.parameters.run-id}}",
]


def described_job(cfg: PipelineConfig) -> dict[str, Any]:
    """The training job the config describes: the builders of flows.manifests given the
    config's own values and the train step's arguments with the config's ``--set``."""
    spec: dict[str, Any] = dict(
        args=[*TRAIN_ARGS, *config_args(cfg)],
        env=pod_env(cfg),
        labels=job_labels(cfg),
        owner=OWNER,
        annotations=job_annotations(),
    )
    if cfg.train.launcher == "trainjob":
        return trainjob.to_manifest(trainjob.build_trainjob(cfg, **spec))
    return pytorchjob.to_manifest(pytorchjob.build_pytorchjob(cfg, **spec))


def pods(wf: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None, dict[str, Any]]]:
    """(where, pod securityContext, container) for every pod the workflow starts."""
    pod_ctx = wf["spec"].get("securityContext")
    found = [(n, pod_ctx, t["container"]) for n, t in templates(wf).items() if "container" in t]
    for kind, replica in job_of(wf)["spec"]["pytorchReplicaSpecs"].items():
        spec = replica["template"]["spec"]
        found += [(f"train/{kind}", spec.get("securityContext"), c) for c in spec["containers"]]
    for name in ("deploy", "rollback-apply"):  # the InferenceService's predictor pods
        assert templates(wf)[name]["resource"]["manifestFrom"] == {"artifact": {"name": "manifest"}}
        (artifact,) = templates(wf)[name]["inputs"]["artifacts"]
        predictor = yaml.safe_load(artifact["raw"]["data"])["spec"]["predictor"]
        found += [(name, predictor.get("securityContext"), c) for c in predictor["containers"]]
    return found
