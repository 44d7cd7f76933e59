"""A real ``mlflow server`` on 127.0.0.1 for tests and benchmarks: SQLite backend store,
proxied artifacts in a local directory, a free port; started and stopped as one process
group."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flows.local.servers.seaweedfs import free_port


class MLflowServer:
    """``mlflow server`` with ``sqlite:///<dir>/mlflow.db`` and artifacts under ``<dir>``."""

    def __init__(
        self,
        directory: Path,
        *,
        auth_config: str | None = None,
        admin: tuple[str, str] | None = None,
    ) -> None:
        """``auth_config``: the text of a basic-auth ini (mlflow/server/auth/config.py); with
        it the server runs ``--app-name basic-auth`` as configs/cluster/mlflow runs it: the
        file in MLFLOW_AUTH_CONFIG_PATH, the admin's (name, password) ``admin`` in
        MLFLOW_AUTH_ADMIN_USERNAME / _PASSWORD, a CSRF key in
        MLFLOW_FLASK_SERVER_SECRET_KEY. Left out: no authentication, as before."""
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.artifacts = directory / "artifacts"
        self.log = directory / "mlflow-server.log"
        self.process: subprocess.Popen | None = None
        self.auth_config = directory / "basic_auth.ini" if auth_config is not None else None
        if self.auth_config is not None:
            self.auth_config.write_text(auth_config)
        self.admin = admin

    def command(self) -> list[str]:
        return [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.directory / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.artifacts),
            "--default-artifact-root",
            "mlflow-artifacts:/",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            *(["--app-name", "basic-auth"] if self.auth_config else []),
        ]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout_s: float = 90.0) -> MLflowServer:
        # No background job runner (7 huey workers): tracking and artifacts are all we need.
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": "",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        if self.auth_config is not None:
            admin, password = self.admin or ("admin", secrets.token_hex(16))
            env |= {
                "MLFLOW_AUTH_CONFIG_PATH": str(self.auth_config),
                "MLFLOW_AUTH_ADMIN_USERNAME": admin,
                "MLFLOW_AUTH_ADMIN_PASSWORD": password,
                "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
            }
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited with {self.process.returncode}; see {self.log}"
                )
            if self.healthy():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy in {timeout_s} s; see {self.log}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@contextmanager
def mlflow_models_serve(model_uri: str, tracking_uri: str, root: Path) -> Iterator[str]:
    """``mlflow models serve`` of ``model_uri`` on 127.0.0.1, as a user starts it (its log in
    ``root``): the URL once ``/ping`` answers; stopped on exit."""
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    env.pop("PYTHONPATH", None)  # the served model must not need this repository
    # mlflow execs uvicorn by name: the venv's bin must be on PATH, as when it is activated.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri]
    command += ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"]
    log_path = root / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, env=env, cwd=root, stdout=log, stderr=log, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/ping", timeout=2)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(log_path.read_text()) from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
