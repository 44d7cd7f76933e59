"""``python -m steps.serve`` as a command: a model URI without a model and a port in use are
one line and exit 2, the port from the flag, then the environment, then the config; SIGINT
stops it cleanly; the server imports no torch; ``python flows/cifar.py serve`` runs the
registry's champion in the foreground."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

from steps.common.config import PipelineConfig
from steps.common.serving.client import ServingClient
from steps.serve import step
from tests.helpers.paths import REPO_ROOT
from tests.helpers.serving_helpers import CHAMPION, NAME, serving


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (f"models:/{NAME}-missing@champion", r"--model-uri models:/.*-missing@champion: "),
        ("EMPTY", r"no MLflow model there \(no MLmodel file\)"),
    ],
    ids=["registry", "directory"],
)
def test_a_uri_without_a_model_is_one_line_and_exit_2(
    champion: dict,
    tmp_path: Path,
    model: str,
    match: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", champion["uri"])
    model = str(tmp_path) if model == "EMPTY" else model
    assert step.main(["--model-uri", model, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("steps.serve: error: ") and err.count("\n") == 1, err
    assert re.search(match, err), err


def test_a_port_in_use_is_exit_2(
    champion: dict,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", champion["uri"])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert step.main(["--model-uri", CHAMPION, "--port", str(port)]) == 2
    assert re.search(
        rf"cannot listen on 127\.0\.0\.1:{port} .*pass another --port", capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "env", "port"),
    [
        (["--port", "9001"], {"PORT": "9002"}, 9001),
        ([], {"PORT": "9002"}, 9002),
        ([], {}, 8080),
    ],
    ids=["flag", "env", "config"],
)
def test_port_comes_from_flag_then_env_then_config(
    argv: list[str], env: dict[str, str], port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PORT", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    args = step.build_parser().parse_args(["--model-uri", "x", *argv])
    assert step.pick_port(args, PipelineConfig()) == port


def test_sigint_stops_it_cleanly(champion: dict) -> None:
    with serving(champion) as running:
        code, output = running.stop(signal.SIGINT)
    assert code == 0, output
    assert "Traceback" not in output
    with pytest.raises(OSError):
        socket.create_connection(running.address, timeout=2).close()


def test_the_server_imports_no_torch() -> None:
    """The cifar-serve image has no torch: the step and what it imports run without it."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # any import of it fails\n"
        "import steps.serve.step, steps.common.serving.client\n"
        "print('loaded')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "loaded"


def test_flow_serve_runs_the_registrys_champion_in_the_foreground(
    champion: dict,
    images: np.ndarray,
) -> None:
    """``python flows/cifar.py serve``: the default model is the registry's champion; the
    URL and a curl line come first; Ctrl-C (SIGINT) stops it, nothing left listening."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": champion["uri"]}
    process = subprocess.Popen(
        [sys.executable, "flows/cifar.py", "serve", "--port", "0"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        match = re.fullmatch(rf"serving {CHAMPION} on (http://\S+) \(POST /invocations\)\n", line)
        assert match, line
        url = match.group(1)
        curl = process.stdout.readline()  # type: ignore[union-attr]
        assert curl.startswith("try: python3 -c ") and f"{url}/invocations" in curl, curl
        with ServingClient(url) as client:
            client.wait_ready(120)
            assert len(client.classes(images[:3])) == 3
        # the line runs as printed from a shell without the virtual environment on PATH
        pasted = subprocess.run(
            ["/bin/sh", "-c", curl.removeprefix("try: ")],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert pasted.returncode == 0, pasted.stderr
        assert len(json.loads(pasted.stdout)["predictions"]) == 1, pasted.stdout
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    parts = urllib.parse.urlsplit(url)
    with pytest.raises(OSError):
        socket.create_connection((parts.hostname, parts.port), timeout=2).close()
