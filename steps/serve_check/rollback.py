"""Move the registry alias back after a failed live check, once.

The version to go back to comes from the benchmark that promoted (``previous_version`` in
its ``benchmark.json``, the ``previous_champion`` tag of the version), never from the
registry's state now: so a retried check that finds the alias already back does nothing,
and never walks the alias to an even older version. An alias that another run has moved
since is someone else's decision: left alone, and said so.
"""

from __future__ import annotations

from mlflow.exceptions import MlflowException

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
