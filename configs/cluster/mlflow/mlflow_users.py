"""The MLflow server's users, made by its admin through MLflow's auth REST API
(``mlflow.server.auth.client.AuthServiceClient``; the server runs ``--app-name basic-auth``
with ``default_permission = NO_PERMISSIONS``, mlflow-auth.yaml):

- the pipeline's steps (PIPELINE_USERNAME / PIPELINE_PASSWORD): EDIT on the experiment
  EXPERIMENT (create runs, log to them, log models) and MANAGE on the registered model
  REGISTERED_MODEL (register versions, tag them, move and delete the alias);
- the predictor (PREDICTOR_USERNAME / PREDICTOR_PASSWORD): READ on both (resolve the alias,
  download the model from the experiment's artifacts), nothing it could change.

Each user is made if missing and its password set to the one given (a rotated Secret takes
effect by running this again); neither is an admin. The experiment and the registered model
are made if missing, so the grants have something to name; each grant is set to exactly its
level. The admin is MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, the server
MLFLOW_TRACKING_URI, as every MLflow client reads them; it waits up to WAIT_S (300) for the
server's /health. No password is printed. Exit 2: a variable missing; 1: the server refused.

    python mlflow_users.py      (the Job mlflow-users; tests/test_mlflow_auth.py runs it too)
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request

NEEDED = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "PIPELINE_USERNAME",
    "PIPELINE_PASSWORD",
    "PREDICTOR_USERNAME",
    "PREDICTOR_PASSWORD",
)


def wait_for(uri: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=5):
                return
        except (urllib.error.URLError, OSError) as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"mlflow-users: {uri} did not answer /health: {exc}") from None
            time.sleep(2)


def ensure_user(auth, username: str, password: str) -> str:
    from mlflow.exceptions import MlflowException

    try:
        auth.get_user(username)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        auth.create_user(username, password)
        return f"user {username}: created"
    auth.update_user_password(username, password)
    auth.update_user_admin(username, False)
    return f"user {username}: password set"


def ensure_grant(auth, username: str, kind: str, resource: str, level: str) -> str:
    """``username`` holds exactly ``level`` on the resource (revoked and granted again when
    it held another)."""
    from mlflow.exceptions import MlflowException

    held = auth.get_user_permission(username, kind, resource).permission
    if held == level:
        return f"{username}: {level} on {kind} {resource} (kept)"
    try:
        auth.revoke_user_permission(username, kind, resource)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    auth.grant_user_permission(username, kind, resource, level)
    return f"{username}: {level} on {kind} {resource} (was {held})"


def main() -> int:
    missing = [name for name in NEEDED if not os.environ.get(name)]
    if missing:
        print(f"mlflow-users: set {', '.join(missing)} (their Secrets)", file=sys.stderr)
        return 2
    env = os.environ
    uri = env["MLFLOW_TRACKING_URI"]
    experiment = env.get("EXPERIMENT", "cifar-pipeline")
    model = env.get("REGISTERED_MODEL", "cifar10-classifier")
    wait_for(uri, float(env.get("WAIT_S", "300")))

    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.server.auth.client import AuthServiceClient

    auth, client = AuthServiceClient(uri), MlflowClient(uri)
    pipeline, predictor = env["PIPELINE_USERNAME"], env["PREDICTOR_USERNAME"]
    try:
        done = [
            ensure_user(auth, pipeline, env["PIPELINE_PASSWORD"]),
            ensure_user(auth, predictor, env["PREDICTOR_PASSWORD"]),
        ]
        found = client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else client.create_experiment(experiment)
        try:
            client.get_registered_model(model)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            client.create_registered_model(model)
        for user, experiment_level, model_level in (
            (pipeline, "EDIT", "MANAGE"),
            (predictor, "READ", "READ"),
        ):
            done.append(ensure_grant(auth, user, "experiment", experiment_id, experiment_level))
            done.append(ensure_grant(auth, user, "registered_model", model, model_level))
    except MlflowException as exc:
        print(f"mlflow-users: {uri} refused: {exc.message.splitlines()[0]}", file=sys.stderr)
        return 1
    for line in done:
        print(f"mlflow-users: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
