"""Which version a rollback goes back to: the one that held the registry alias before this
pipeline run and served.

The benchmark records it when it registers a version (``previous_champion`` tag,
``previous_version`` in its decision, the step's ``previous-version`` output), and
``steps.serve_check`` and the workflow's rollback tasks go back to it when the deployment
or its live check fails. A version that did not serve is passed over for the one it
replaced: one rolled back (tagged ``serving.rollback``), or promoted by a pipeline run that
ended FAILED or KILLED (its deployment or check failed, or the run was stopped before the
check passed), so a rollback never lands on a model that never answered.
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


def served_lookup(client, name: str) -> Callable[[str], dict[str, Any] | None]:
    """What the registry says of a version: whether it served (not rolled back, not
    promoted by a pipeline run that ended FAILED or KILLED), and the version it replaced;
    None for one it cannot read (kept: a version set by hand)."""

    def lookup(version: str) -> dict[str, Any] | None:
        try:
            tags = client.get_model_version(name, version).tags
        except MlflowException:
            return None
        served = ROLLBACK_TAG not in tags
        if served and tags.get("mlflow_run_id"):
            try:
                status = client.get_run(tags["mlflow_run_id"]).info.status
            except MlflowException:  # deleted since: nothing known against it
                status = ""
            served = status not in UNSERVED_RUN
        return {"served": served, "previous_champion": tags.get(PREVIOUS_TAG)}

    return lookup
