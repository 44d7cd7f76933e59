"""Move the registry alias back after a failed deployment or live check, once.

The version to go back to comes from the benchmark that promoted (``previous_version`` in
its ``benchmark.json``, the ``previous_champion`` tag of the version, its
``previous-version`` output), never from the registry's state now: so a second rollback
(a retried check, or the workflow's ``rollback-alias`` task after serve-check already
moved it) finds the alias already back and does nothing, and never walks the alias to an
even older version. An alias that another run has moved since is someone else's decision:
left alone, and said so.

    python -m steps.serve_check.rollback --version V --previous-version P --reason TEXT
        [--mlflow-run-id ID] [--config F] [--set k=v ...] [--debug]

is the workflow's ``rollback-alias`` task (flows/pipeline/serving_templates.py): after ``deploy`` or
``serve-check`` failed, whatever ended them (a failure condition, a deadline, a pod that
never reported), the alias goes back to ``P`` (or is removed when ``P`` is ""), the
version is tagged ``serving.rollback`` with the reason, and so is the pipeline's run.
"""

from __future__ import annotations

import argparse

from mlflow.exceptions import MlflowException

from steps.common.config import PipelineConfig, load_config
from steps.common.contracts.promotion import Promotion
from steps.common.step_cli import add_common, exit_process, run_main, tracking_wanted

ROLLBACK_TAG = "serving.rollback"  # on the pipeline's run and on the rolled-back version


class RollbackError(RuntimeError):
    """The registry could not be read or the alias not moved."""


def alias_holder(client, name: str, alias: str) -> str | None:
    """The version the alias points to, or None where it points nowhere."""
    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST" or "not found" in exc.message.lower():
            return None
        raise RollbackError(f"cannot read alias {alias!r} of {name!r}: {exc.message}") from None


def roll_back(client, name: str, alias: str, version: str, previous: str, reason: str) -> str:
    """Point ``alias`` back at ``previous`` (delete it when ``previous`` is ""), if it still
    points at ``version``, the one this run promoted. Returns the decision, one sentence."""
    holder = alias_holder(client, name, alias)
    back = f"v{previous}" if previous else "no version (first champion)"
    try:
        if holder == version:
            if previous:
                client.set_registered_model_alias(name, alias, previous)
                done = f"alias {alias} of {name} moved back from v{version} to v{previous}"
            else:
                client.delete_registered_model_alias(name, alias)
                done = f"alias {alias} of {name} removed (v{version} was the first champion)"
            client.set_model_version_tag(name, version, ROLLBACK_TAG, reason[:5000])
            return done
    except MlflowException as exc:
        raise RollbackError(
            f"cannot move alias {alias} of {name} back to {back}: {exc.message}"
        ) from None
    if holder == (previous or None):
        return f"alias {alias} of {name} already back on {back}: nothing to roll back"
    where = f"v{holder}" if holder else "nothing"
    return (
        f"alias {alias} of {name} points at {where}, not this run's v{version}: "
        "left alone (moved since by someone else)"
    )


def roll_back_promotion(
    cfg: PipelineConfig, promotion: Promotion, failure: str, tracked: bool
) -> str:
    """The alias back to the champion before this run (``promotion``: benchmark.json's),
    or why not."""
    version = promotion.version
    if not version:
        return "the benchmark registered nothing: no alias to move back"
    if not promotion.promoted:
        return f"v{version} was not promoted: the alias was not this run's to move back"
    if not tracked:
        return "MLflow tracking is off here: the registry was not touched"
    import mlflow

    name = promotion.registered_model or cfg.benchmark.registered_model
    alias = promotion.alias or cfg.benchmark.alias
    previous = promotion.previous_version
    try:
        return roll_back(mlflow.MlflowClient(), name, alias, version, previous, failure)
    except RollbackError as exc:
        return f"rollback failed: {exc}"


def rolled_back_before(cfg: PipelineConfig, promotion: Promotion) -> str | None:
    """Why this run's promoted version is not to be checked again: it no longer holds the
    alias (an earlier attempt, or this run's rollback task, moved it back; or another run
    moved it since), or it carries the rollback tag; None while it is still the champion
    this run made it. RollbackError when the registry cannot be read."""
    import mlflow

    name = promotion.registered_model or cfg.benchmark.registered_model
    alias = promotion.alias or cfg.benchmark.alias
    version = promotion.version
    client = mlflow.MlflowClient()
    holder = alias_holder(client, name, alias)
    try:
        reason = client.get_model_version(name, version).tags.get(ROLLBACK_TAG)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise RollbackError(f"cannot read {name} v{version}: {exc.message}") from None
        reason = None  # not in this registry: it holds no alias either
    if holder == version and not reason:
        return None
    where = f"v{holder}" if holder else "no version"
    why = f" (rolled back: {reason})" if reason else ""
    return (
        f"{name} v{version} no longer holds alias {alias}, which points at {where}{why}: "
        "not checked again"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.serve_check.rollback",
        description="Move the alias back from this run's version to the one before it.",
    )
    parser.add_argument("--version", required=True, help="the registry version this run promoted")
    parser.add_argument(
        "--previous-version", required=True, help='the version before it ("": none, a first)'
    )
    parser.add_argument("--reason", required=True, help="why (tagged on the version and run)")
    add_common(parser, outputs=False)
    return parser


def run(args: argparse.Namespace) -> str:
    cfg = load_config(args.config, args.overrides)
    if not tracking_wanted(cfg, args.mlflow_run_id):
        decision = "MLflow tracking is off here: the registry was not touched"
    else:
        import mlflow

        from steps.common.pipeline_run import connect

        connect(cfg.tracking)
        client = mlflow.MlflowClient()
        name, alias = cfg.benchmark.registered_model, cfg.benchmark.alias
        decision = roll_back(client, name, alias, args.version, args.previous_version, args.reason)
        if args.mlflow_run_id and "nothing to roll back" not in decision:
            try:
                client.set_tag(args.mlflow_run_id, ROLLBACK_TAG, f"{args.reason}; {decision}")
            except MlflowException as exc:
                raise RollbackError(f"{decision}, but cannot tag the run: {exc.message}") from None
    print(f"rollback-alias: {decision}")
    return decision


def main(argv: list[str] | None = None) -> int:
    return run_main("rollback", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    exit_process(main())
