"""Argo's memoization over runs of the rendered pipeline, without a cluster: what the key
tables and the resubmit tests share.

A run is the Workflow of the WorkflowTemplate with its parameters, joined as Argo's
controller joins them; each memoized step in the DAG's order has its task's arguments
substituted as Argo does (``tasks.*`` of the steps before it), its template's inputs bound
from them, and its ``memoize.key`` evaluated (flows/local's expr evaluator, which the local
tests hold to Argo's). A key the cache holds is a hit: the task hands on the saved outputs
(v4.0.5 workflow/controller/operator.go ``executeTemplate``); else the step "runs" and
writes where it was told (its output URI under ``runs/<workflow>``; the staged dataset is
content-addressed, by its source here), and a success is saved (configmap_cache.go
``Save``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from flows.cifar import build_submission, build_template
from flows.local.substitution import substitute
from flows.local.template_ref import resolve
from flows.pipeline.memo_keys import STEPS
from steps.common.config import PipelineConfig


@dataclass
class SimulatedRun:
    name: str
    keys: dict[str, str] = field(default_factory=dict)  # step -> its evaluated key
    ran: set[str] = field(default_factory=set)  # steps that missed and ran
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)  # step -> outputs
    tasks: dict[str, str] = field(default_factory=dict)  # step -> the task that ran or hit
    template: dict[str, Any] = field(default_factory=dict)  # the WorkflowTemplate


def _made(step: str, name: str, args: dict[str, str], params: dict[str, str]) -> dict[str, str]:
    """What a step that runs hands on: where it was told to write, the run that did it."""
    made = {"workflow": name}
    if step == "stage":
        source = params["workflow.parameters.data-source"]
        digest = hashlib.sha256(source.encode()).hexdigest()
        made |= {"dataset-uri": f"s3://cifar/datasets/{digest}", "digest": digest}
    elif step == "train":
        made |= {"model-uri": args["model-uri"], "mlflow-run-id": f"run-of-{name}"}
        made["job-name"] = f"cifar-train-{name[-5:]}"
    elif step == "optimize":
        made |= {"optimized": args["optimized-uri"], "mlflow-run-id": f"run-of-{name}"}
    else:
        made |= {"report-uri": args["output-uri"], "mlflow-run-id": f"run-of-{name}"}
        made |= {"promoted": "true", "model-version": "1", "previous-version": ""}
    return made


def simulate(
    cfg: PipelineConfig,
    values: dict[str, str],
    name: str,
    cache: dict[str, dict[str, str]],
    *,
    source_keys: bool = False,
) -> SimulatedRun:
    """One run named ``name`` with ``-p`` ``values`` over the memo ``cache`` (key ->
    outputs), which it fills with what it ran."""
    template = build_template(cfg, source_keys=source_keys).to_dict()
    wf = resolve(build_submission(cfg, values).to_dict(), [template], values)
    spec = wf["spec"]
    given = {p["name"]: str(p["value"]) for p in spec["arguments"]["parameters"]}
    params = {f"workflow.parameters.{k}": v for k, v in given.items()}
    scope: dict[str, str] = {**params, "workflow.name": name}
    templates = {t["name"]: t for t in spec["templates"]}
    tasks = {t["name"]: t for t in templates[spec["entrypoint"]]["dag"]["tasks"]}
    scope["tasks.create-run.outputs.parameters.run-id"] = f"run-of-{name}"
    run = SimulatedRun(name, template=template)
    for step in STEPS:
        names = ["train", "train-multinode"] if step == "train" else [step]
        running = "train-multinode" if step == "train" and int(given["nodes"]) > 1 else step
        if running not in tasks:  # the TrainJob: one training template
            running = step
        for other in [*names, *(f"{n}-again" for n in names)]:
            scope[f"tasks.{other}.status"] = "Skipped"
        task = tasks[running]
        template_ = templates[task["template"]]
        given_args = task.get("arguments", {}).get("parameters", [])
        args = {p["name"]: substitute(p["value"], scope) for p in given_args}
        inputs = {
            f"inputs.parameters.{p['name']}": args.get(p["name"], p.get("default", ""))
            for p in template_["inputs"]["parameters"]
        }
        key = substitute(template_["memoize"]["key"], {**scope, **inputs})
        if key not in cache:
            cache[key] = _made(step, name, args, params)
            run.ran.add(step)
        run.keys[step], run.outputs[step], run.tasks[step] = key, cache[key], running
        scope[f"tasks.{running}.status"] = "Succeeded"
        for output, value in cache[key].items():
            scope[f"tasks.{running}.outputs.parameters.{output}"] = value
    return run
