"""A run's page, ``runs/<name>/index.html``, and the run list ``ui`` serves: one HTML file
each, self-contained (its script, style and data inline; no network, no external script
or font; a Content-Security-Policy that allows nothing else). The data is the run as
Argo's Workflow (``argo_workflow``) with what the Argo UI's node panel shows beside it
(each pod's attempts, exit code and the end of its log, its template), and the links:
the MLflow run, the benchmark report, the served endpoint while it is up. The script
(``assets/page.js``) draws the DAG as the Argo UI does and follows a running run."""

from __future__ import annotations

import html
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from flows.local.review.argo_workflow import workflow_status
from flows.local.review.listing import pods_by_phase
from flows.local.review.runs import load_state
from flows.local.status import file_name

ASSETS = Path(__file__).parent / "assets"
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: 10x faster
PAGE = "index.html"
TAIL_LINES = 40
TAIL_BYTES = 64 * 1024
REPORT = Path("artifacts") / "benchmark" / "report.md"
RUN_URL = "workflow.outputs.parameters.mlflow-run-url"
# Nothing but the page's own inline script and style; its data: images; fetching itself
# (the ui server's page follows a running run by fetching its own address).
POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'"
)


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log (its last 64 kB read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - TAIL_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return []
    return text.rstrip("\n").split("\n")[-lines:] if text else []


def node_details(run_dir: Path, state: dict[str, Any], workflow: dict) -> dict[str, dict]:
    """What the node panel shows beyond Argo's node: by node id, the record's key,
    attempts, exit code, log (its path in the run directory and its end)."""
    name = workflow["metadata"]["name"]
    records = {**state.get("tasks", {})}
    if state.get("exit_handler"):
        records["onExit"] = state["exit_handler"]
    details = {}
    for ident, node in workflow["status"]["nodes"].items():
        key = "" if node["name"] == name else node["name"][len(name) :].removeprefix(".")
        record = records.get(key) or (records.get(name) if node["name"] == name else None)
        found: dict[str, Any] = {"key": key or name}
        if record:
            found["attempts"] = record.get("attempts", 0)
            found["exitCode"] = record.get("exit_code")
            found["seconds"] = record.get("process_seconds")
        log = run_dir / "logs" / f"{file_name(key or name)}.log"
        if node["type"] == "Pod" and log.is_file():
            found["log"] = f"logs/{log.name}"
            found["tail"] = log_tail(log)
        details[ident] = found
    return details


def links(run_dir: Path, state: dict[str, Any]) -> list[dict[str, str]]:
    """The MLflow run, the benchmark report, each endpoint while it is up."""
    found = []
    run_url = state.get("globals", {}).get(RUN_URL, "")
    if run_url.startswith(("http://", "https://")):  # a workflow output: no other scheme
        found.append({"label": "MLflow run", "href": run_url})
    if (run_dir / REPORT).is_file():
        found.append({"label": "benchmark report", "href": REPORT.as_posix()})
    for service_name, service in (state.get("services") or {}).items():
        up = service.get("state") not in ("Stopped", "Failed")
        up = up and str(service.get("url", "")).startswith("http://")
        label = f"endpoint {service_name}" + ("" if up else f" ({service.get('state')})")
        found.append({"label": label, "href": service["url"] if up else ""})
    return found


def run_data(run_dir: Path) -> dict[str, Any]:
    """Everything the page shows of one run."""
    state = load_state(run_dir)
    workflow = workflow_status(state)
    spec = workflow.pop("spec")
    used = {n.get("templateName") for n in workflow["status"]["nodes"].values()}
    templates = {
        t["name"]: yaml.dump(t, Dumper=DUMPER, sort_keys=False, width=100)
        for t in spec.get("templates", [])
        if t["name"] in used
    }
    workflow["spec"] = {"arguments": spec.get("arguments", {}), "onExit": spec.get("onExit")}
    return {
        "kind": "run",
        "workflow": workflow,
        "details": node_details(run_dir, state, workflow),
        "templates": templates,
        "links": links(run_dir, state),
        "live": workflow["status"]["phase"] in ("Running", "Pending"),
        "written": time.time(),
    }


def list_data(workflows: list[dict[str, Any]], base: str = "runs/") -> dict[str, Any]:
    """The run list: each run's row as ``list`` prints it and its page's address."""
    rows = []
    for workflow in workflows:
        status, name = workflow["status"], workflow["metadata"]["name"]
        rows.append({
            "name": name, "href": f"{base}{name}/", "phase": status["phase"],
            "created": workflow["metadata"].get("creationTimestamp"),
            "startedAt": status.get("startedAt"), "finishedAt": status.get("finishedAt"),
            "progress": status.get("progress", ""), "message": status.get("message", ""),
            "pods": pods_by_phase(status.get("nodes", {})),
        })  # fmt: skip
    # followed always: a run started later shows up
    return {"kind": "list", "runs": rows, "live": True, "written": time.time()}


def render(data: dict[str, Any], title: str) -> str:
    """The HTML: data as JSON in a script element (``<`` escaped, so no text in it can
    end the element), the style and script inline."""
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    style = (ASSETS / "page.css").read_text()
    script = (ASSETS / "graph.js").read_text() + (ASSETS / "page.js").read_text()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'  # no favicon request
        f"<title>{html.escape(title)}</title>\n<style>\n{style}</style>\n</head>\n"
        '<body><header id="top"></header><main id="main"></main>\n'
        f'<script id="run-data" type="application/json">{payload}</script>\n'
        f"<script>\n{script}</script>\n</body></html>\n"
    )


def run_page(run_dir: Path) -> str:
    data = run_data(run_dir)
    workflow = data["workflow"]
    return render(data, f"{workflow['metadata']['name']}: {workflow['status']['phase']}")


def write_page(run_dir: Path) -> Path:
    """Write ``index.html`` in the run directory whole (a new file moved over the old,
    so a browser reloading it never reads half a page)."""
    target = run_dir / PAGE
    tmp = run_dir / f".{PAGE}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(run_page(run_dir))
    tmp.replace(target)
    return target


class PageWriter:
    """The runner's ``on_save``: the page rewritten at each state change. A page that
    cannot be written is told once and never stops the run."""

    def __init__(self) -> None:
        self.failed = False
        self.lock = threading.Lock()  # nodes finish on their own threads: one write at a time

    def __call__(self, run_dir: Path) -> None:
        try:
            with self.lock:
                write_page(run_dir)
        except Exception as exc:  # the page is a view: the run goes on without it
            if not self.failed:
                print(
                    f"cifar: the run's page {run_dir / PAGE} was not written: "
                    f"{type(exc).__name__}: {exc}",
                    file=sys.stderr,
                )
            self.failed = True
