"""The peers of ``benchmarks/serving.py``, each as a user would deploy the champion with it.

- MLServer 1.7 with mlserver-mlflow, what KServe's ``kserve-mlserver`` runtime runs for an
  MLflow model (kserve/kserve ``config/runtimes/kserve-mlserver.yaml``:
  ``MLSERVER_MODEL_IMPLEMENTATION``, HTTP on 8080, MLServer's own defaults otherwise, i.e.
  one parallel worker process and no adaptive batching), in its own virtual environment
  (``--mlserver-venv``; its pins of mlflow and the runtimes equal to this one's, since the
  pyfunc asks for them). Also with the settings that suit this model better, to be fair:
  inference in the server's process and adaptive batching of up to 32.
- ``mlflow models serve -w 1`` in this environment.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from flows.local.servers.seaweedfs import free_ports

MLSERVER = "1.7.1"
# Installed beside MLServer at this environment's versions: what the pyfunc runs on.
PINNED = ("mlflow", "numpy", "pandas", "onnxruntime", "openvino")
# MLServer 1.7.1's parallel worker calls asyncio.get_event_loop() in its new process, which
# uvloop 0.22 and later refuse (RuntimeError: no current event loop): every worker dies and
# the model never loads. 0.21.0 is the uvloop of MLServer 1.7.1's release.
UVLOOP = "0.21.0"
MLSERVER_SETTINGS: dict[str, dict[str, Any]] = {
    "as KServe runs it": {"server": {}, "model": {}},
    "in-process, adaptive batching 32": {
        "server": {"parallel_workers": 0},
        "model": {"max_batch_size": 32, "max_batch_time": 0.002},
    },
}


def install_line(venv: Path) -> str:
    pins = []
    for package in PINNED:
        try:
            pins.append(f"'{package}=={version(package)}'")
        except PackageNotFoundError:
            continue
    return (
        f"python3 -m venv {venv} && {venv}/bin/pip install 'mlserver=={MLSERVER}' "
        f"'mlserver-mlflow=={MLSERVER}' 'uvloop=={UVLOOP}' {' '.join(pins)}"
    )


def mlserver_versions(venv: Path) -> str | None:
    """``mlserver X, mlserver-mlflow Y`` installed in ``venv``; None when it is not there."""
    python = venv / "bin" / "python"
    if not (venv / "bin" / "mlserver").exists():
        return None
    import subprocess

    code = (
        "from importlib.metadata import version as v; "
        "print(f\"mlserver {v('mlserver')}, mlserver-mlflow {v('mlserver-mlflow')}\")"
    )
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    return result.stdout.strip() or None


def mlserver(
    venv: Path, model_dir: Path, name: str, folder: Path, setting: str
) -> tuple[list[str], int, dict[str, str]]:
    """The command, HTTP port and environment of MLServer serving ``model_dir`` as ``name``
    with one of MLSERVER_SETTINGS: its settings files written to ``folder``."""
    http, grpc, metrics = free_ports(3)
    chosen = MLSERVER_SETTINGS[setting]
    folder.mkdir(parents=True, exist_ok=True)
    server = {"http_port": http, "grpc_port": grpc, "metrics_port": metrics, **chosen["server"]}
    (folder / "settings.json").write_text(json.dumps(server))
    model = {
        "name": name,
        "implementation": "mlserver_mlflow.MLflowRuntime",
        "parameters": {"uri": str(model_dir)},
        **chosen["model"],
    }
    (folder / "model-settings.json").write_text(json.dumps(model))
    command = [str(venv / "bin" / "mlserver"), "start", str(folder)]
    return command, http, {"PYTHONPATH": ""}


def probe_inference(url: str, name: str, body: bytes, headers: dict[str, str]) -> str:
    """One Open Inference Protocol request: ``200`` or the status and the answer's line."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{url}/v2/models/{name}/infer", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read()[:200].decode(errors='replace')}"


def mlflow_models_serve(uri: str) -> tuple[list[str], int]:
    (port,) = free_ports(1)
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri]
    command += ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"]
    return command, port
