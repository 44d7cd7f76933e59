"""A small Argo Server on 127.0.0.1 for the submission tests (tests/test_flow_submit.py,
tests/test_cluster_submitter.py): ``FakeArgo`` speaks the routes ``flows.argo.submit``
calls, with the paths and bodies of Argo's ``pkg/apiclient`` protos, Argo's JSON error
bodies and the bearer token; it records every request. The environment the flow reads
(``ENVIRONMENT``), the smoke config and the settings that make it fit a cluster."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers.paths import REPO_ROOT

TOKEN = "s3cr3t-t0ken"
SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
# smoke.yaml made fit for a cluster: shared storage and an MLflow server
CLUSTER_READY = [
    "--set",
    "storage.root_uri=s3://cifar",
    "--set",
    "tracking.uri=http://mlflow.mlflow:5000",
    "--set",
    "cluster.poll_interval_s=0.01",
]
ROUTE = re.compile(r"/api/v1/(workflows|cron-workflows|workflow-templates)/([^/?]+)(?:/([^/?]+))?")
BODY_KEY = {"cron-workflows": "cronWorkflow", "workflow-templates": "template"}
RESOURCE = {"cron-workflows": "cronworkflows", "workflow-templates": "workflowtemplates"}


class FakeArgo:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.phases = ["Running", "Running", "Succeeded"]
        self.message = ""
        self.stored: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in BODY_KEY}
        self.crons = self.stored["cron-workflows"]
        self.templates = self.stored["workflow-templates"]
        self.reject: tuple[int, str] | None = None  # the next create of reject_kind answers this
        self.reject_kind = "workflows"
        self.workflows: dict[str, dict[str, Any]] = {}  # earlier runs, by name (--resubmit)
        # per route: our next writes that lose to someone else's write just before them
        self.races: dict[str, int] = {k: 0 for k in BODY_KEY}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.server.daemon_threads = True  # keep-alive connections must not delay close
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                fake.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "body": json.loads(raw) if raw else None,
                        "auth": self.headers.get("Authorization"),
                    }
                )
                code, answer = fake.answer(self.command, self.path, self.headers, body)
                self._answer(code, answer)

            do_GET = do_POST = do_PUT = _serve

        return Handler

    @staticmethod
    def error(code: int, grpc: int, message: str) -> tuple[int, dict[str, Any]]:
        return code, {"code": grpc, "message": message}

    def answer(self, method: str, path: str, headers: Any, body: Any) -> tuple[int, dict]:
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.error(401, 16, "token not valid. see https://argo-workflows.readthedocs.io")
        match = ROUTE.fullmatch(path.split("?")[0])
        if not match:
            return self.error(404, 5, "Not Found")
        kind, namespace, name = match.groups()
        if namespace == "forbidden":
            return self.error(
                403,
                7,
                f'{kind} is forbidden: User "system:serviceaccount:ci" '
                f'cannot create resource "{kind}" in namespace "forbidden"',
            )
        if namespace == "missing":
            return self.error(404, 5, 'namespaces "missing" not found')
        if method == "POST" and self.reject and kind == self.reject_kind:
            (code, message), self.reject = self.reject, None
            return self.error(code, 3 if code == 400 else 6, message)
        if kind == "workflows":
            return self.workflow(method, namespace, name, body)
        return self.upsert(kind, method, name, body)

    def workflow(
        self, method: str, namespace: str, name: str | None, body: Any
    ) -> tuple[int, dict]:
        if method == "POST":
            wf = body["workflow"]
            refused = self.check_reference(wf)
            if refused:
                return refused
            wf["metadata"].update(name=wf["metadata"]["generateName"] + "x7k2p", uid="u-1")
            self.created = wf
            return 200, wf
        if name in self.workflows:
            return 200, self.workflows[name]
        if name != getattr(self, "created", {}).get("metadata", {}).get("name"):
            return self.error(404, 5, f'workflows.argoproj.io "{name}" not found')
        phase = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
        status: dict[str, Any] = {
            "phase": phase,
            "progress": "2/5" if phase == "Running" else "5/5",
        }
        status["outputs"] = {
            "parameters": [
                {"name": "mlflow-run-url", "value": "http://mlflow/#/experiments/1/runs/abc"}
            ]
        }
        if self.message and phase != "Running":
            status["message"] = self.message
        return 200, {**self.created, "status": status}

    def check_reference(self, wf: dict[str, Any]) -> tuple[int, dict] | None:
        """What the server checks of a Workflow run from a WorkflowTemplate."""
        ref = wf["spec"].get("workflowTemplateRef")
        if ref is None:
            return None
        template = self.templates.get(ref["name"])
        if template is None:
            return self.error(400, 3, f'workflowtemplates.argoproj.io "{ref["name"]}" not found')
        declared = {p["name"] for p in template["spec"]["arguments"]["parameters"]}
        for p in wf["spec"].get("arguments", {}).get("parameters", []):
            if p["name"] not in declared:
                return self.error(400, 3, f"spec.arguments.{p['name']}.value is required")
        return None

    def _stale(self) -> tuple[int, dict]:
        return self.error(
            409,
            10,
            "the object has been modified; please apply your changes to the latest "
            "version and try again",
        )

    def _race(self, kind: str, name: str, obj: dict[str, Any]) -> None:
        """Someone else writes the object between our read and our write."""
        self.races[kind] -= 1
        other = json.loads(json.dumps(obj))
        old = self.stored[kind].get(name, {}).get("metadata", {}).get("resourceVersion", "0")
        other["metadata"]["resourceVersion"] = str(int(old) + 1)
        self.stored[kind][name] = other

    def upsert(self, kind: str, method: str, name: str | None, body: Any) -> tuple[int, dict]:
        objects = self.stored[kind]
        if method == "GET":
            if name not in objects:
                return self.error(404, 5, f'{RESOURCE[kind]}.argoproj.io "{name}" not found')
            return 200, objects[name]
        obj = body[BODY_KEY[kind]]
        meta = obj["metadata"]
        if self.races[kind]:
            self._race(kind, meta["name"], obj)
        if method == "POST":
            if meta["name"] in objects:
                return self.error(
                    409, 6, f'{RESOURCE[kind]}.argoproj.io "{meta["name"]}" already exists'
                )
            meta["resourceVersion"] = "1"
        else:
            stored = objects[name]["metadata"]["resourceVersion"]
            if meta.get("resourceVersion") != stored:
                return self._stale()
            meta["resourceVersion"] = str(int(stored) + 1)
        objects[meta["name"]] = obj
        return 200, obj


# What the flow reads from the environment: a developer's shell must not leak into a test.
ENVIRONMENT = (
    "ARGO_SERVER",
    "ARGO_SECURE",
    "ARGO_BASE_HREF",
    "ARGO_HOST",
    "ARGO_NAMESPACE",
    "ARGO_INSECURE_SKIP_VERIFY",
    "MLFLOW_TRACKING_URI",
)


def submit(*argv: str) -> int:
    """``python flows/cifar.py --config configs/smoke.yaml --set ... --submit ARGV`` (the
    smoke config made fit for a cluster), in this process."""
    from flows import cifar
    from flows.cli import main as cli

    return cli.main(["--config", SMOKE, *CLUSTER_READY, "--submit", *argv], cifar)
