"""``--resubmit WORKFLOW``: a failed cluster run, submitted again as a new Workflow of the
current WorkflowTemplate (new images after a fix) with the failed run's parameters, so each
step whose memo key did not change is a hit (flows/pipeline/memo_keys.py).

The plan comes first, per memoized step: reused (its key is the one the failed run saved;
``<step>-reused`` still checks that what it points at exists) or to run, and which part of
its key changed (image, config, parameters, inputs: an upstream step runs again), or that
it never succeeded there (Argo saves successes only: v4.0.5 workflow/controller/
operator.go). The failed run's keys are its nodes' ``memoizationStatus.key``; the new ones
are the current template's keys evaluated as Argo would (flows/local/substitution.py) with
the carried parameters and the outputs a hit would hand on. ``--dry-run`` prints only that.
The command line's ``--resubmit`` (flows/cli/main.py) calls ``resubmit`` with the pipeline's
builders and the submission's functions (flows/argo/submit.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hera.exceptions import HeraException, NotFound
from hera.workflows import Workflow, WorkflowTemplate

from flows.argo.connection import ArgoTarget, explain, service
from flows.errors import SubmitError, UsageError
from flows.local.errors import ExpressionError, UnsupportedFeature
from flows.local.substitution import substitute
from flows.pipeline.memo_keys import STEPS, split_key

FAILED = ("Failed", "Error")
# which upstream output each input a key holds is (flows/cifar.py's wiring)
UPSTREAM = {"dataset-uri": ("stage", "dataset-uri"), "model-uri": ("train", "model-uri")}
UPSTREAM["optimized-uri"] = ("optimize", "optimized")


@dataclass(frozen=True)
class Planned:
    step: str
    reused: bool
    why: str
    outputs: Mapping[str, str]  # what a hit hands on (reused), else {}


def fetch_failed(target: ArgoTarget, name: str) -> dict[str, Any]:
    """The workflow ``name`` as the Argo server has it; a user error (one line, exit 2)
    when it does not exist or did not fail."""
    svc = service(target)
    try:
        found = svc.get_workflow(name, namespace=target.namespace)
    except NotFound:
        raise UsageError(
            f"--resubmit {name}: no workflow {name} in namespace {target.namespace} "
            "(argo list shows them; a deleted one cannot be resubmitted)"
        ) from None
    except HeraException as exc:
        raise SubmitError(explain(exc, target, "workflow")) from exc
    wf = found.model_dump(mode="json", by_alias=True, exclude_none=True)
    phase = wf.get("status", {}).get("phase") or "Pending"
    if phase not in FAILED:
        raise UsageError(
            f"--resubmit {name}: it is {phase}, not Failed or Error; resubmit a failed run "
            "(a new run of the pipeline: --submit)"
        )
    return wf


def carried(wf: Mapping[str, Any], declared: set[str]) -> dict[str, str]:
    """The parameters the failed run was given (its ``spec.arguments``) that the current
    template still declares."""
    given = wf.get("spec", {}).get("arguments", {}).get("parameters", [])
    return {p["name"]: str(p.get("value", "")) for p in given if p["name"] in declared}


def _nodes_of(wf: Mapping[str, Any], tasks: set[str]) -> list[dict[str, Any]]:
    nodes = wf.get("status", {}).get("nodes", {}).values()
    return [n for n in nodes if n.get("displayName") in tasks and n.get("memoizationStatus")]


def _outputs(node: Mapping[str, Any]) -> dict[str, str]:
    params = node.get("outputs", {}).get("parameters", [])
    return {p["name"]: str(p.get("value", "")) for p in params}


def plan(
    template: Mapping[str, Any], wf: Mapping[str, Any], values: Mapping[str, str]
) -> list[Planned]:
    """Per memoized step of ``template`` (the current WorkflowTemplate), whether a run with
    ``values`` reuses what the failed run ``wf`` saved, and why (not)."""
    spec = template["spec"]
    templates = {t["name"]: t for t in spec["templates"]}
    entry = next(t for t in spec["templates"] if t["name"] == spec["entrypoint"])
    tasks = entry["dag"]["tasks"]
    defaults = {p["name"]: str(p.get("value", "")) for p in spec["arguments"]["parameters"]}
    params = {f"workflow.parameters.{k}": v for k, v in {**defaults, **values}.items()}
    planned: dict[str, Planned] = {}
    for step in STEPS:  # in the DAG's order: a step's inputs are an earlier step's outputs
        mine = [t for t in tasks if _key(templates.get(t["template"], {})).startswith(f"{step}-")]
        names = {t["name"] for t in mine}  # its runs and runs again
        memoized = templates[mine[0]["template"]]
        planned[step] = _step_plan(step, memoized, wf, names, params, planned)
    return list(planned.values())


def _key(template: Mapping[str, Any]) -> str:
    return str(template.get("memoize", {}).get("key", ""))


def _step_plan(
    step: str,
    template: Mapping[str, Any],
    wf: Mapping[str, Any],
    names: set[str],
    params: dict[str, str],
    earlier: Mapping[str, Planned],
) -> Planned:
    name = wf["metadata"]["name"]
    nodes = _nodes_of(wf, names)
    done = [n for n in nodes if n.get("phase") == "Succeeded"]
    if not nodes:
        return Planned(step, False, f"it never ran in {name}", {})
    if not done:
        return Planned(step, False, f"it did not succeed in {name}: nothing was saved", {})
    # the run again's node, when there is one, holds what the run handed on
    old = max(done, key=lambda n: n.get("displayName", "").endswith("-again"))
    _, was = split_key(old["memoizationStatus"]["key"])
    if not was:
        return Planned(step, False, "its key in the failed run is of another release", {})
    scope = dict(params)
    rerun = [
        upstream for i in STEPS[step].inputs if not earlier[(upstream := UPSTREAM[i][0])].reused
    ]
    for i in STEPS[step].inputs:
        up, output = UPSTREAM[i]
        scope[f"inputs.parameters.{i}"] = earlier[up].outputs.get(output, "")
    try:
        _, now = split_key(substitute(template["memoize"]["key"], scope))
    except (ExpressionError, UnsupportedFeature) as exc:
        return Planned(step, False, f"its key cannot be evaluated here ({exc})", {})
    changed = [part for part in ("image", "config", "parameters") if was.get(part) != now.get(part)]
    if not rerun and was.get("inputs") != now.get("inputs"):
        changed.append("inputs")
    why = [f"{', '.join(changed)} changed"] if changed else []
    if rerun:
        ran = [s for s in STEPS if s in rerun]  # in the DAG's order
        why.append(f"inputs: {' and '.join(ran)} run{'s' if len(ran) == 1 else ''} again")
    if why:
        return Planned(step, False, "; ".join(why), {})
    outputs = _outputs(old)
    source = outputs.get("workflow") or name
    return Planned(
        step, True, f"key unchanged (from {source}, if its objects still exist)", outputs
    )


def print_plan(
    name: str, planned: list[Planned], values: Mapping[str, str], out: Callable[[str], None]
) -> None:
    given = ", ".join(f"{k}={v}" for k, v in values.items()) or "none given"
    out(f"Resubmitting {name} as a new run of the current WorkflowTemplate (parameters: {given})")
    for p in planned:
        out(f"  {p.step:<10} {'reused' if p.reused else 'to run':<7} {p.why}")
    out(
        "  create-run, deploy, serve-check and the rollbacks are never memoized: they run "
        "as the DAG decides"
    )


def resubmit(
    template: WorkflowTemplate,
    build: Callable[[dict[str, str]], Workflow],
    target: ArgoTarget,
    name: str,
    *,
    dry_run: bool,
    submit: Callable[[Workflow], int],
    apply: Callable[[WorkflowTemplate], object],
    out: Callable[[str], None] = print,
) -> int:
    """Fetch the failed run, print the plan; unless ``dry_run``, update the template and
    submit a Workflow of it (``build``) with the carried parameters."""
    wf = fetch_failed(target, name)
    rendered = template.to_dict()
    declared = {p["name"] for p in rendered["spec"]["arguments"]["parameters"]}
    values = carried(wf, declared)
    print_plan(name, plan(rendered, wf, values), values, out)
    if dry_run:
        return 0
    apply(template)
    return submit(build(values))
