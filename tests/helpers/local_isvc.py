"""InferenceService resource templates for the local runner's tests (KServe v0.19.0's
v1beta1): small real HTTP servers written to a folder (ready at once, later, never, or
exiting), the apply and delete templates, a workflow around them, and what is left
running after a run."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path
from typing import Any

import psutil
import yaml

from flows.local.workflow import LocalRunner

API = "serving.kserve.io/v1beta1"
RESOURCE = "inferenceservices.serving.kserve.io"
READY = "/v2/health/ready"
# modes: ok (ready at once), slow (ready after $READY_AFTER_S, 0.5 s), never (503 forever),
# exit N
SERVER = textwrap.dedent(
    """
    import http.server, os, sys, time
    mode, value = sys.argv[1], sys.argv[2]
    port = int(sys.argv[sys.argv.index("--port") + 1])
    host = sys.argv[sys.argv.index("--host") + 1]
    assert port == int(os.environ["PORT"]), (port, os.environ["PORT"])
    if mode == "exit":
        sys.exit(int(value))
    started, delay = time.monotonic(), float(os.environ.get("READY_AFTER_S", "0.5"))
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ready = mode == "ok" or (mode == "slow" and time.monotonic() - started > delay)
            code = 200 if ready else 503  # /value too: a model not loaded answers nothing
            body = value if ready and self.path == "/value" else ""
            self.send_response(code)
            self.end_headers()
            self.wfile.write(body.encode())
        def log_message(self, *args):
            pass
    print(f"serving {value} on http://{host}:{port} pid {os.getpid()}", flush=True)
    http.server.HTTPServer((host, port), Handler).serve_forever()
    """
)


def isvc(
    tmp_path: Path,
    mode: str = "ok",
    value: str = "v1",
    name: str = "clf",
    ready_after_s: float | None = None,
) -> str:
    """An InferenceService as 22-cluster builds one: port and host args, probes, env."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    env = [{"name": "MODEL", "value": value}]
    if ready_after_s is not None:
        env.append({"name": "READY_AFTER_S", "value": str(ready_after_s)})
    container = {
        "name": "kserve-container",
        "image": "cifar-serve:1",
        "command": ["python", str(script), mode, value],
        "args": ["--host", "0.0.0.0", "--port", "8080"],
        "env": env,
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": READY, "port": 8080}},
        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": 8080}},
    }
    manifest = {
        "apiVersion": API,
        "kind": "InferenceService",
        "metadata": {"name": name, "annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
        "spec": {"predictor": {"minReplicas": 1, "containers": [container]}},
    }
    return yaml.safe_dump(manifest, sort_keys=False)


def deploy(name: str, text: str, deadline: float | None = None) -> dict[str, Any]:
    """The deploy resource template: apply, conditions (not evaluated here), URL outputs."""
    outputs = [
        {"name": "url", "valueFrom": {"jsonPath": "{.status.address.url}"}},
        {"name": "external-url", "valueFrom": {"jsonPath": "{.status.url}"}},
        {"name": "name", "valueFrom": {"jsonPath": "{.metadata.name}"}},
    ]
    template: dict[str, Any] = {
        "name": name,
        "resource": {
            "action": "apply",
            "manifest": text,
            "successCondition": "status.conditions.#(type==Ready).status == True",
            "failureCondition": "status.conditions.#(type==Ready).reason == RolloutFailed",
        },
        "outputs": {"parameters": outputs},
    }
    if deadline is not None:
        template["activeDeadlineSeconds"] = deadline
    return template


def curl(name: str = "check", wait: bool = False) -> dict[str, Any]:
    """A later task that reaches the service at the URL it was given; ``wait``: trying
    again for a while while nothing answers there yet (a re-applied service rolling out)."""
    retry = ["--retry", "60", "--retry-delay", "1", "--retry-connrefused"] if wait else []
    return {
        "name": name,
        "inputs": {"parameters": [{"name": "url"}]},
        "container": {
            "image": "curlimages/curl:8",
            "command": ["curl", "-sf", *retry, "{{inputs.parameters.url}}/value"],
        },
    }


def workflow(templates: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "serve"},
        "spec": {
            "entrypoint": "main",
            "templates": [{"name": "main", "dag": {"tasks": tasks}}, *templates],
        },
    }


def task(name: str, template: str, depends: str = "", url_of: str = "") -> dict[str, Any]:
    """A DAG task; ``url_of``: the deploy task whose ``url`` output it is given."""
    found: dict[str, Any] = {"name": name, "template": template}
    if depends:
        found["depends"] = depends
    if url_of:
        url = f"{{{{tasks.{url_of}.outputs.parameters.url}}}}"
        found["arguments"] = {"parameters": [{"name": "url", "value": url}]}
    return found


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def assert_gone(pids: list[int], ports: list[int]) -> None:
    """No process left (nor a child), nothing listening on the ports."""
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert not alive, alive
    for port in ports:
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
        with socket.socket() as sock:  # free to listen on again (TIME_WAIT allowed, as
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # any server does)
            sock.bind(("127.0.0.1", port))
            sock.listen()


def served(runner: LocalRunner) -> dict[str, dict[str, Any]]:
    return runner.services.describe()
