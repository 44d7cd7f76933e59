"""The champion put back after a run that moved the alias and never finished its live check:
the exit handler's ``restore-champion`` task (flows/pipeline/serving_templates.py).

Argo v4.0.5 runs only the exit handler's pods after ``argo stop`` (pkg/apis/workflow/
v1alpha1/workflow_types.go ``ShutdownStrategy.ShouldExecute``: Stop executes on-exit pods
only; workflow/controller/workflowpod.go ``createWorkflowPod`` marks every other node Failed
without a pod; exec_control.go ``applyExecutionControl`` stops the running ones), so a run
stopped during deploy or serve-check never reaches its ``rollback-*`` tasks: they are
Failed without running, and the alias stays on a version nobody checked. A local run stopped
by Ctrl-C ends the same way (flows/local/signals.py). This task runs in the exit handler
whenever the workflow did not succeed:

    python -m steps.serve_check.restore --mlflow-run-id ID --failures JSON --reason TEXT
        [--outputs-dir DIR] [--config F] [--set k=v ...] [--debug]

It finds the version this pipeline run promoted (the benchmark's ``mlflow_run_id`` and
``promotion`` tags on it). If the run's live check passed (``serving.passed`` on the run),
nothing is undone. If the alias still holds that version, it goes back to the version it
replaced (the ``previous_champion`` tag: one that served, steps/benchmark/previous.py), or is
removed after a first champion, the version tagged ``serving.rollback`` with the reason, as
``steps.serve_check.rollback`` does. Outputs: ``restore-service``, "true" when the
InferenceService must be put back too (this task moved the alias, or the run's own
``rollback-apply`` / ``rollback-delete`` is among ``{{workflow.failures}}``: stopped before it
finished), and ``previous-version`` ("" for none: the service is deleted). An alias someone
else moved since is left alone. After ``argo terminate`` nothing runs, this task neither:
the next run's benchmark restores the alias before it decides (steps/benchmark/previous.py
``restore_left_alias``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mlflow.exceptions import MlflowException

from steps.common.config import load_config
from steps.common.step_cli import add_common, exit_process, run_main, tracking_wanted, write_outputs
from steps.serve_check.rollback import ROLLBACK_TAG, RollbackError, alias_holder, roll_back

PASSED_TAG = "serving.passed"  # steps.serve_check.report: "true" once the check passed
PREVIOUS_TAG = "previous_champion"  # steps.benchmark.previous: who held the alias before
RUN_TAG = "mlflow_run_id"  # steps.benchmark.champion: the pipeline run that registered it
SERVICE_ROLLBACKS = ("rollback-apply", "rollback-delete")


def failed_templates(failures: str) -> set[str]:
    """The template names in ``{{workflow.failures}}`` (Argo v4.0.5 operator.go: a JSON list
    of the failed nodes, then ``strconv.Quote``-d; either form, or nothing, is taken)."""
    try:
        nodes: Any = json.loads(failures) if failures.strip() else []
        if isinstance(nodes, str):
            nodes = json.loads(nodes) if nodes.strip() else []
    except ValueError:
        return set()
    if not isinstance(nodes, list):
        return set()
    return {
        str(node.get("templateName") or node.get("displayName"))
        for node in nodes
        if isinstance(node, dict)
    }


def promoted_by(client, name: str, run_id: str) -> Any | None:
    """The newest version of ``name`` that the pipeline run ``run_id`` registered and
    promoted (a retried benchmark registers again), None if none."""
    found = client.search_model_versions(f"name = '{name}' and tags.{RUN_TAG} = '{run_id}'")
    promoted = [v for v in found if v.tags.get("promotion", "").startswith("promoted")]
    return max(promoted, key=lambda v: int(v.version), default=None)


def restore(
    client, name: str, alias: str, run_id: str, failures: set[str], reason: str
) -> tuple[str, bool, str]:
    """(what was done, whether the service goes back too, the version it goes back to)."""
    version = promoted_by(client, name, run_id)
    if version is None:
        return f"run {run_id} promoted no version of {name}: nothing to restore", False, ""
    previous = version.tags.get(PREVIOUS_TAG) or "none"
    previous = "" if previous == "none" else previous
    if client.get_run(run_id).data.tags.get(PASSED_TAG) == "true":
        return f"v{version.version} passed its live check: kept", False, previous
    holder = alias_holder(client, name, alias)
    if holder == version.version:
        done = roll_back(client, name, alias, version.version, previous, reason)
        try:
            client.set_tag(run_id, ROLLBACK_TAG, f"{reason}; {done}")
        except MlflowException as exc:
            raise RollbackError(f"{done}, but cannot tag the run: {exc.message}") from None
        return done, True, previous
    stopped = failures & set(SERVICE_ROLLBACKS)
    if holder == (previous or None):  # the run's rollback-alias moved it
        back = f"v{previous}" if previous else "no version"
        if stopped:
            return (
                f"alias {alias} of {name} already back on {back}; {', '.join(sorted(stopped))} "
                "did not finish: the service goes back too",
                True,
                previous,
            )
        return f"alias {alias} of {name} already back on {back}: nothing to restore", False, ""
    where = f"v{holder}" if holder else "nothing"
    return (
        f"alias {alias} of {name} points at {where}, not this run's v{version.version}: "
        "left alone (moved since by someone else)",
        False,
        "",
    )


def serving_image(client, cfg, version: str) -> str:
    """The image that serves ``version`` (its ``serving_image`` tag, which the benchmark
    sets: cifar-optimize for a torch champion); cifar-serve for a version registered before
    the tag, or none to go back to."""
    tags = client.get_model_version(cfg.benchmark.registered_model, version).tags if version else {}
    return tags.get("serving_image") or cfg.images.image("serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.serve_check.restore",
        description="Put the champion back after a run that never finished its live check.",
    )
    parser.add_argument("--failures", default="", help="{{workflow.failures}} (Argo's JSON)")
    parser.add_argument("--reason", required=True, help="why (tagged on the version and run)")
    add_common(parser)
    return parser


def run(args: argparse.Namespace) -> str:
    cfg = load_config(args.config, args.overrides)
    client, service, previous = None, False, ""
    if not args.mlflow_run_id or not tracking_wanted(cfg, args.mlflow_run_id):
        decision = "MLflow tracking is off here: the registry was not touched"
    else:
        import mlflow

        from steps.common.pipeline_run import connect

        connect(cfg.tracking)
        b = cfg.benchmark
        client, failures = mlflow.MlflowClient(), failed_templates(args.failures)
        try:
            decision, service, previous = restore(
                client, b.registered_model, b.alias, args.mlflow_run_id, failures, args.reason
            )
        except MlflowException as exc:
            first = exc.message.splitlines()[0]
            raise RollbackError(
                f"cannot restore alias {b.alias} of {b.registered_model}: {first}"
            ) from None
    write_outputs(
        args.outputs_dir,
        {
            "restore-service": "true" if service else "false",
            "previous-version": previous,
            "previous-serving-image": serving_image(client, cfg, previous) if service else "",
        },
    )
    print(f"restore-champion: {decision}")
    return decision


def main(argv: list[str] | None = None) -> int:
    return run_main("restore", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    exit_process(main())
