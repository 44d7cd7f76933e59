"""MLflow as configs/cluster/mlflow installs it: a real ``mlflow server --app-name basic-auth``
with the install's basic_auth.ini (its database put in the test's directory), the admin from
the variables the Deployment sets from the Secret mlflow-admin, and the users made by the
install's own Job script (mlflow_users.py) with the variables its Job sets. Then the roles
as the pods meet them: the pipeline's steps log, register, promote and roll back with their
user; the predictor reads the champion and may move nothing; a request without a user is
refused; no password reaches a log, a param or a tag."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.exceptions import MlflowException

from flows.local.servers.mlflow_server import MLflowServer
from tests.helpers.cluster_build import CLUSTER, kubectl
from tests.helpers.paths import REPO_ROOT

# one worker for the module: its server (the users fixture) is built once, and its steps
# test reads the session's bundle, whose group that is (tests/helpers/groups.py GROUPED_BY)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("bundle")]
LAYER = CLUSTER / "mlflow"


def rendered() -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(LAYER)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def job_env() -> dict[str, Any]:
    (job,) = [d for d in rendered() if d["kind"] == "Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@dataclass
class Users:
    """The server and each role's (name, password), as the Secrets hold them."""

    server: MLflowServer
    admin: tuple[str, str]
    pipeline: tuple[str, str]
    predictor: tuple[str, str]
    experiment: str
    model: str


def make_users(users: Users, **changed: str) -> subprocess.CompletedProcess:
    """The Job's command, ``python mlflow_users.py``, with the variables the Job sets (its
    literal values; its Secret references filled with the users' names and passwords)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env |= {k: v for k, v in job_env().items() if isinstance(v, str)}
    env["MLFLOW_TRACKING_URI"] = users.server.uri  # the Service's address, here
    env |= {"MLFLOW_TRACKING_USERNAME": users.admin[0], "MLFLOW_TRACKING_PASSWORD": users.admin[1]}
    env |= {"PIPELINE_USERNAME": users.pipeline[0], "PIPELINE_PASSWORD": users.pipeline[1]}
    env |= {"PREDICTOR_USERNAME": users.predictor[0], "PREDICTOR_PASSWORD": users.predictor[1]}
    env |= changed
    command = [sys.executable, str(LAYER / "mlflow_users.py")]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Users]:
    root = tmp_path_factory.mktemp("mlflow-auth")
    ini = (LAYER / "basic_auth.ini").read_text()
    database = f"database_uri = sqlite:///{root / 'basic_auth.db'}"
    ini, count = re.subn(r"^database_uri = .*$", database, ini, flags=re.M)
    assert count == 1
    admin = ("admin", secrets.token_hex(16))
    server = MLflowServer(root / "server", auth_config=ini, admin=admin).start()
    env = job_env()
    found = Users(
        server,
        admin,
        ("cifar-pipeline", secrets.token_hex(16)),
        ("cifar-predictor", secrets.token_hex(16)),
        env["EXPERIMENT"],
        env["REGISTERED_MODEL"],
    )
    try:
        done = make_users(found)
        assert done.returncode == 0, done.stderr
        yield found
    finally:
        server.stop()


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch, users: Users):
    """Set MLflow's own variables as a pod gets them from its Secret (None: no user)."""

    def login(user: tuple[str, str] | None):
        import mlflow

        monkeypatch.setenv("MLFLOW_TRACKING_URI", users.server.uri)
        names = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
        for name, value in zip(names, user or (None, None), strict=True):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        return mlflow.MlflowClient(users.server.uri)

    return login


def test_the_install_matches_the_configs_and_runs_the_auth_app() -> None:
    """The Deployment runs the auth app with this ini and the admin from mlflow-admin; the
    Job grants what the configs name (tracking.experiment, benchmark.registered_model)."""
    from steps.common.config import load_config

    (deploy,) = [d for d in rendered() if d["kind"] == "Deployment"]
    (server,) = deploy["spec"]["template"]["spec"]["containers"]
    assert "--app-name=basic-auth" in server["args"]
    env = {e["name"]: e for e in server["env"]}
    assert env["MLFLOW_AUTH_CONFIG_PATH"]["value"] == "/etc/mlflow/basic_auth.ini"
    for name in ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD"):
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-admin", "key": name}
    (config,) = [d for d in rendered() if d["kind"] == "ConfigMap"]
    assert config["data"]["basic_auth.ini"] == (LAYER / "basic_auth.ini").read_text()
    assert config["data"]["mlflow_users.py"] == (LAYER / "mlflow_users.py").read_text()
    assert "default_permission = NO_PERMISSIONS" in config["data"]["basic_auth.ini"]
    assert "admin_password" not in config["data"]["basic_auth.ini"]
    job = job_env()
    for name in ("cluster", "kind"):
        cfg = load_config(REPO_ROOT / "configs" / f"{name}.yaml")
        assert job["EXPERIMENT"] == cfg.tracking.experiment
        assert job["REGISTERED_MODEL"] == cfg.benchmark.registered_model


def test_no_user_and_a_wrong_password_are_refused(users: Users, as_user) -> None:
    for user in (None, (users.pipeline[0], "not-the-password")):
        client = as_user(user)
        with pytest.raises(MlflowException) as refused:
            client.search_experiments()
        assert refused.value.error_code == "UNAUTHENTICATED"


def test_the_predictor_reads_the_champion_and_moves_nothing(
    users: Users, as_user, tmp_path: Path
) -> None:
    client = as_user(users.pipeline)
    experiment = client.get_experiment_by_name(users.experiment).experiment_id
    run = client.create_run(experiment).info.run_id  # the steps' experiment, which it EDITs
    version = client.create_model_version(users.model, f"runs:/{run}/model", run_id=run).version
    client.set_registered_model_alias(users.model, "reader-test", version)
    reader = as_user(users.predictor)
    assert reader.get_model_version_by_alias(users.model, "reader-test").version == version
    for move in (
        lambda: reader.set_registered_model_alias(users.model, "reader-test", "1"),
        lambda: reader.delete_registered_model_alias(users.model, "reader-test"),
        lambda: reader.set_model_version_tag(users.model, version, "previous_champion", "1"),
        lambda: reader.create_model_version(users.model, "s3://elsewhere/model"),
    ):
        with pytest.raises(MlflowException) as refused:
            move()
        assert refused.value.error_code == "PERMISSION_DENIED"
    anonymous = as_user(None)
    with pytest.raises(MlflowException) as refused:
        anonymous.set_registered_model_alias(users.model, "reader-test", "1")
    assert refused.value.error_code == "UNAUTHENTICATED"
    held = as_user(users.pipeline).get_model_version_by_alias(users.model, "reader-test")
    assert held.version == version  # where the pipeline put it


def test_the_job_runs_again_and_a_rotated_password_takes_over(users: Users, as_user) -> None:
    again = make_users(users)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert f"mlflow-users: user {users.pipeline[0]}: password set" in lines
    assert sum(line.endswith("(kept)") for line in lines) == 4  # every grant as it was
    assert users.pipeline[1] not in again.stdout + again.stderr
    rotated = secrets.token_hex(16)
    done = make_users(users, PREDICTOR_PASSWORD=rotated)
    assert done.returncode == 0, done.stderr
    with pytest.raises(MlflowException) as refused:
        as_user(users.predictor).get_registered_model(users.model)
    assert refused.value.error_code == "UNAUTHENTICATED"
    assert as_user((users.predictor[0], rotated)).get_registered_model(users.model)
    users.predictor = (users.predictor[0], rotated)  # what its Secrets hold now
    missing = make_users(users, PIPELINE_PASSWORD="")
    assert missing.returncode == 2
    assert missing.stderr == "mlflow-users: set PIPELINE_PASSWORD (their Secrets)\n"


def test_the_steps_log_register_promote_and_roll_back_as_the_pipelines_user(
    users: Users, as_user, bundle, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    """The real steps, with the pipeline's user in MLflow's variables as its pods get them:
    ``steps.tracking start`` opens the run, the benchmark logs into it, registers the model
    and moves the alias (a first champion), the rollback task moves it back, ``end`` closes
    the run. No password is in what they printed, in the run's params or tags, or in the
    version's tags."""
    from steps.benchmark import step as benchmark
    from steps.serve_check import rollback
    from steps.tracking import main as tracking
    from tests.helpers.model_bundle import champion_args

    client = as_user(users.pipeline)
    out = tmp_path / "out"
    sets = ["--set", f"tracking.experiment={users.experiment}"]
    assert tracking(["start", "--run-name", "auth-test", "--outputs-dir", str(out), *sets]) == 0
    run_id = (out / "run_id").read_text()
    args = champion_args(bundle, tmp_path / "report", users.model, outputs_dir=tmp_path / "bench")
    args.mlflow_run_id = run_id
    args.overrides.append(f"tracking.experiment={users.experiment}")
    result = benchmark.run(args)
    version = (tmp_path / "bench" / "model-version").read_text()
    assert result.promoted is True
    assert client.get_model_version_by_alias(users.model, "champion").version == version
    # the predictor loads what the steps registered
    reader = as_user(users.predictor)
    assert reader.get_model_version_by_alias(users.model, "champion").version == version
    from mlflow.artifacts import download_artifacts

    as_user(users.predictor)
    path = Path(
        download_artifacts(f"models:/{users.model}/{version}", dst_path=str(tmp_path / "m"))
    )
    assert (path / "MLmodel").is_file()
    as_user(users.pipeline)
    previous = (tmp_path / "bench" / "previous-version").read_text()
    argv = ["--version", version, "--previous-version", previous, "--reason", "auth test"]
    assert rollback.main([*argv, "--mlflow-run-id", run_id, *sets]) == 0
    with pytest.raises(MlflowException):
        client.get_model_version_by_alias(users.model, "champion")
    end = ["end", "--run-id", run_id, "--status", "Succeeded", "--outputs-dir", str(out), *sets]
    assert tracking(end) == 0
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    printed = capfd.readouterr()
    password = users.pipeline[1]
    where = {
        "stdout": printed.out,
        "stderr": printed.err,
        "params": repr(run.data.params),
        "tags": repr(run.data.tags),
        "version tags": repr(client.get_model_version(users.model, version).tags),
        "outputs": "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()),
    }
    assert not [name for name, text in where.items() if password in text]


def test_a_local_run_logs_in_with_the_credentials_of_its_environment(
    users: Users, as_user, tmp_path: Path
) -> None:
    """The rendered pipeline's own create-run and close-run, run by the local runner as
    ``python flows/cifar.py`` runs them, against the authenticated server: with the
    pipeline's user in the runner's environment the run is made and closed (the runner
    hands its environment to every step, Secrets by their key); without it, create-run
    fails in one line and nothing is made."""
    from flows.cifar import ENTRYPOINT, EXIT_HANDLER, build_submission, build_template
    from flows.local.workflow import LocalRunner
    from steps.common.config import load_config

    sets = [f"tracking.uri={users.server.uri}", f"tracking.experiment={users.experiment}"]
    sets += ["cluster.mlflow_secret=cifar-mlflow", "cluster.retry_limit=0"]  # 401: no retry
    cfg = load_config(None, sets)
    template = build_template(cfg).to_dict()
    for t in template["spec"]["templates"]:  # the pipeline cut to its MLflow run
        if t["name"] == ENTRYPOINT:
            t["dag"]["tasks"] = [x for x in t["dag"]["tasks"] if x["name"] == "create-run"]
        if t["name"] == EXIT_HANDLER:
            t["dag"]["tasks"] = [x for x in t["dag"]["tasks"] if x["name"] == "close-run"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    base["PYTHONPATH"] = str(REPO_ROOT)
    results = {}
    for name, login in (("with", users.pipeline), ("without", None)):
        env = dict(base)
        if login:
            env |= {"MLFLOW_TRACKING_USERNAME": login[0], "MLFLOW_TRACKING_PASSWORD": login[1]}
        cwd = tmp_path / name
        cwd.mkdir()
        results[name] = LocalRunner(
            build_submission(cfg).to_dict(),
            cwd / "runs",
            cwd=cwd,
            env=env,
            workflow_templates=[template],
            cache_dir=cwd / "cache",
        ).run()
    made = results["with"]
    assert made.status == "Succeeded", made.failed_task
    run_id = made.globals["workflow.outputs.parameters.mlflow-run-id"]
    assert as_user(users.pipeline).get_run(run_id).info.status == "FINISHED"
    refused = results["without"]
    assert refused.status == "Failed" and refused.tasks["create-run"].state.value == "Failed"
    log = (refused.run_dir / "logs" / "create-run.log").read_text()
    assert "tracking: error: cannot create the pipeline's run: " in log, log[-800:]
    assert "failed with error code 401" in log, log[-800:]
