"""The command line: rendering as a script, option combinations and bad values as one
line with exit 2, and the no-flag mode handing the workflow to the local runner."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows import cifar
from flows.cli import main as cli
from flows.cli import serve
from flows.errors import FlowError
from flows.manifests.names import APP
from steps.common.config import ConfigError, load_config
from tests.helpers.paths import REPO_ROOT


def test_render_as_a_script_from_the_repo_root() -> None:
    """``python flows/cifar.py`` runs the file once: as ``__main__``, never imported again
    as ``flows.cifar`` by the command line it calls (-X importtime lists every import)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGO_")}
    argv = ["flows/cifar.py", "--config", "configs/smoke.yaml", "--render", "--cron"]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
    assert "flows.cli.main" in imported and "flows.cifar" not in imported
    template, cron = yaml.safe_load_all(done.stdout)
    assert (template["kind"], template["metadata"]["name"]) == (
        "WorkflowTemplate",
        "cifar-pipeline",
    )
    assert cron["kind"] == "CronWorkflow"
    assert cron["spec"]["workflowSpec"]["workflowTemplateRef"] == {"name": "cifar-pipeline"}


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        pytest.param(["--cron"], r"--cron goes with --render or --submit", id="cron-alone"),
        pytest.param(["--render", "--wait"], r"--wait follows a submitted workflow", id="wait"),
        pytest.param(["--cron", "--submit", "--wait"], r"a CronWorkflow starts one", id="cron"),
        pytest.param(
            ["--render", "--resume", "runs/x"], r"--resume continues a local run", id="resume"
        ),
        pytest.param(
            ["--render", "--set", "train.epochs=0"],
            r"--set train\.epochs=0: train\.ep",
            id="bad-value",
        ),
        pytest.param(
            ["--render", "--set", "train.nproc_per_node=4", "--set", "cluster.gpus_per_node=2"],
            r"train\.nproc_per_node 4 > cluster\.gpus",
            id="more-procs-than-gpus",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], match: str, capsys) -> None:
    assert cli.main(["--config", str(REPO_ROOT / "configs" / "smoke.yaml"), *argv], cifar) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(match, err), err
    with pytest.raises((cli.UsageError, ConfigError, FlowError), match=match):
        cli.main(["--config", str(REPO_ROOT / "configs" / "smoke.yaml"), *argv, "--debug"], cifar)


def test_no_mode_flag_runs_the_workflow_locally(monkeypatch) -> None:
    smoke = str(REPO_ROOT / "configs" / "smoke.yaml")
    calls = []
    fake = type(sys)("flows.local.run")
    fake.run_local = lambda wf, **kw: calls.append((wf.to_dict(), kw)) or 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flows.local.run", fake)
    assert cli.main(["--config", smoke, "--set", "train.epochs=1", "-p", "lr=0.5"], cifar) == 7
    ((wf, kw),) = calls
    # what --submit runs: a Workflow of the WorkflowTemplate, -p values as its arguments
    # (--set in the template's defaults, -p in the run's parameters: the manifest is all)
    assert wf["kind"] == "Workflow" and wf["spec"]["workflowTemplateRef"] == {"name": APP}
    # closing: the CLI's lines after the run (flows/cli/hints.py), as tests/test_first_hour.py runs
    assert set(kw) == {
        "workflow_templates",
        "parameters",
        "resume",
        "closing",
        "no_cache",
        "refresh",
    }
    assert kw["resume"] is None
    assert (kw["no_cache"], kw["refresh"]) == (False, [])  # reuse what the memo cache holds
    assert kw["parameters"] == {"lr": "0.5"}
    ((template,),) = [kw["workflow_templates"]]
    assert template["kind"] == "WorkflowTemplate" and template["metadata"]["name"] == APP
    defaults = {p["name"]: p["value"] for p in template["spec"]["arguments"]["parameters"]}
    assert defaults["epochs"] == "1" and defaults["lr"] != "0.5"  # the config's, not -p's


@pytest.mark.parametrize(
    ("argv", "model", "tail"),
    [
        ([], "models:/cifar10-classifier@champion", []),
        (["--set", "benchmark.alias=prod"], "models:/cifar10-classifier@prod", []),
        (["--model", "runs:/abc/served", "--port", "0"], "runs:/abc/served", ["--port", "0"]),
    ],
    ids=["champion", "alias", "model"],
)
def test_serve_runs_the_champions_server(
    argv: list[str], model: str, tail: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = serve.build_serve_parser().parse_args(argv)
    command, env = serve.serve_command(args, load_config(None, args.overrides))
    assert command[1:7] == ["-m", "steps.serve", "--model-uri", model, "--host", "127.0.0.1"]
    assert command[7 : 7 + len(tail)] == tail
    # the local run's store, made absolute as a local run makes it
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO_ROOT)


def test_serve_with_no_model_there_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "flows/cifar.py", "serve", "--model", str(tmp_path), "--port", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.endswith("no MLflow model there (no MLmodel file); give the champion "
                                "pyfunc, e.g. models:/cifar10-classifier@champion\n")  # fmt: skip
    assert done.stderr.count("\n") == 1, done.stderr
