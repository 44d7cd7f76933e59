"""Which version a rollback goes back to: the one that held the registry alias before this
pipeline run and served.

The benchmark records it when it registers a version (``previous_champion`` tag,
``previous_version`` in its decision, the step's ``previous-version`` output), and
``steps.serve_check`` and the workflow's rollback tasks go back to it when the deployment
or its live check fails. A version that did not serve is passed over for the one it
replaced: one rolled back (tagged ``serving.rollback``), or promoted by a pipeline run that
did not succeed (``unsucceeded``: it ended FAILED or KILLED, its deployment or check failed
or it was stopped before the check passed; or, terminated, it never ended and its check
never passed), so a rollback never lands on a model that never answered.

After ``argo terminate`` no exit handler runs (Argo v4.0.5 workflow_types.go
``ShutdownStrategy.ShouldExecute``: Terminate executes no pod), so a run terminated during
deploy or serve-check leaves the alias on its unchecked version and its MLflow run
RUNNING. The next run's benchmark puts the alias back before it decides
(``restore_left_alias``), so it is compared with, and rolls back to, a champion that served.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlflow.exceptions import MlflowException

PREVIOUS_TAG = "previous_champion"  # on a version: who held the alias before this run's
NO_PREVIOUS = "none"  # the tag's value for a first champion (the decision says "")
# steps.serve_check.rollback.ROLLBACK_TAG (a step imports no other step): a version whose
# deployment or live check failed
ROLLBACK_TAG = "serving.rollback"
UNSERVED_RUN = ("FAILED", "KILLED")  # a pipeline run that ended so never passed its check
RUN_TAG = "mlflow_run_id"  # on a version: the pipeline run that registered it
# on a pipeline run: steps.serve_check.report's verdict, and the workflow (steps.tracking
# start tags every pipeline run with it; a run of a step started alone has none)
PASSED_TAG = "serving.passed"
WORKFLOW_TAG = "argo.workflow"


def previous_version(
    champion: dict[str, Any] | None,
    run_id: str | None,
    lookup: Callable[[str], dict[str, Any] | None] | None = None,
) -> str:
    """The version that held the alias before this pipeline run and served: the champion,
    unless a first attempt of this same run (a retried benchmark) promoted it; then the one
    that version replaced, so a rollback never lands on this run's own model. Then back
    past every version ``lookup`` says did not serve (``served`` False), to the one it
    replaced. "" for none."""
    if champion is None:
        return ""
    candidate = str(champion["version"])
    if run_id and champion.get("mlflow_run_id") == run_id:
        candidate = _replaced(champion.get("previous_champion"))
    seen: set[str] = set()
    while candidate and lookup is not None and candidate not in seen:
        seen.add(candidate)
        found = lookup(candidate)
        if found is None or found["served"]:
            break
        candidate = _replaced(found.get("previous_champion"))
    return candidate


def _replaced(tag: str | None) -> str:
    earlier = tag or NO_PREVIOUS
    return "" if earlier == NO_PREVIOUS else str(earlier)


def unsucceeded(client, run_id: str, current: str | None = None) -> str | None:
    """How the pipeline run ``run_id`` did not succeed, or None: it ended FAILED or KILLED,
    or it never ended although it is a workflow's run (``argo.workflow``) other than
    ``current`` and its live check never passed: the exit handler that would have closed
    it never ran (``argo terminate``). One run at a time (``cluster.mutex``) is what makes
    a RUNNING run of another workflow an abandoned one. A run it cannot read: None."""
    try:
        run = client.get_run(run_id)
    except MlflowException:  # deleted since: nothing known against it
        return None
    status, tags = run.info.status, run.data.tags
    if status in UNSERVED_RUN:
        return f"ended {status}"
    if (
        status == "RUNNING"
        and run_id != current
        and tags.get(WORKFLOW_TAG)
        and tags.get(PASSED_TAG) != "true"
    ):
        return (
            f"never ended and never passed its live check (workflow {tags[WORKFLOW_TAG]} "
            "terminated?)"
        )
    return None


def served_lookup(
    client, name: str, current: str | None = None
) -> Callable[[str], dict[str, Any] | None]:
    """What the registry says of a version: whether it served (not rolled back, not
    promoted by a pipeline run that did not succeed, ``unsucceeded``; ``current``: this
    run, still running), and the version it replaced; None for one it cannot read (kept: a
    version set by hand)."""

    def lookup(version: str) -> dict[str, Any] | None:
        try:
            tags = client.get_model_version(name, version).tags
        except MlflowException:
            return None
        served = ROLLBACK_TAG not in tags
        if served and tags.get(RUN_TAG):
            served = unsucceeded(client, tags[RUN_TAG], current) is None
        return {"served": served, "previous_champion": tags.get(PREVIOUS_TAG)}

    return lookup


def restore_left_alias(client, name: str, alias: str, run_id: str) -> str | None:
    """Put ``alias`` back when the version holding it was promoted by another pipeline run
    that did not succeed and nothing rolled it back (terminated during deploy or its live
    check): to the version it replaced, back past any that did not serve
    (``previous_version``), or remove it when none did. The version is tagged
    ``serving.rollback`` with why, so it is never gone back to. A version carrying that tag
    holds the alias only because someone put it back by hand: left alone. Returns what was
    done, None when nothing was."""
    try:
        holder = client.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None  # no alias (or no model yet): nothing was left
    tags = holder.tags
    promoter = tags.get(RUN_TAG)
    if not promoter or promoter == run_id or ROLLBACK_TAG in tags:
        return None
    why = unsucceeded(client, promoter, run_id)
    if why is None:
        return None
    left = {"version": holder.version, "mlflow_run_id": promoter}
    left["previous_champion"] = tags.get(PREVIOUS_TAG)
    target = previous_version(left, promoter, served_lookup(client, name, run_id))
    back = f"v{target}" if target else "no version (its first champion)"
    reason = (
        f"alias {alias} left on v{holder.version} by run {promoter}, which {why}: "
        f"restored to {back} before run {run_id} decided"
    )
    if target:
        client.set_registered_model_alias(name, alias, target)
    else:
        client.delete_registered_model_alias(name, alias)
    client.set_model_version_tag(name, holder.version, ROLLBACK_TAG, reason[:5000])
    return reason
