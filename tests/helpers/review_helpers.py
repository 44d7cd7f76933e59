"""What the tests of ``list``, ``get``, ``logs``, the run's page and ``ui`` share: runs of
Argo's own examples (tests/argo_examples/, sleeps cut) in one runs directory, each page
written by the runner as it ran, and a real headless Chromium (Debian's ``chromium``,
driven by Playwright; never a downloaded browser) that records every request a page
makes and lets none leave this machine."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from flows.local.review.commands import main
from flows.local.review.node_tree import node_id
from flows.local.review.page import PageWriter
from flows.local.workflow import LocalRunner
from tests.helpers.local_examples import example
from tests.helpers.paths import SHARED

CHROMIUM = "/usr/bin/chromium"
SCHEMA = SHARED / "schemas" / "argo-workflows-v4.0.5.schema.json"
# Argo UI's node colours (argo-ui config.scss, as graph-panel.scss paints .node .bg)
PHASE_FILL = {
    "Succeeded": "rgb(24, 190, 148)",  # $argo-success-color #18BE94
    "Failed": "rgb(233, 109, 118)",  # $argo-failed-color #E96D76
    "Error": "rgb(233, 109, 118)",
    "Running": "rgb(13, 173, 234)",  # $argo-running-color #0DADEA
    "Pending": "rgb(244, 192, 48)",  # $argo-status-warning-color #f4c030
    "Skipped": "rgb(109, 127, 139)",  # $argo-color-gray-6 #6D7F8B
    "Omitted": "rgb(109, 127, 139)",
}


def no_sleep(manifest: dict[str, Any]) -> dict[str, Any]:
    """The example with its jobs' sleeps cut (they only make it long)."""
    for template in manifest["spec"]["templates"]:
        container = template.get("container", {})
        if "args" in container:
            container["args"] = [a.replace("sleep 10", "true").replace("sleep 30", "true")
                                 for a in container["args"]]  # fmt: skip
    return manifest


# (run name, example): a failed pod entrypoint with a steps exit handler; a failed DAG with
# a retried task; a loop in a DAG; loops of 4 in loops of 4 (steps nested in steps); DAGs
# nested in a DAG
EXAMPLES = {
    "exit-handlers": "exit-handlers",
    "fail-fast-off": "dag-disable-failFast",
    "loops-dag": "loops-dag",
    "loops-nested": "parallelism-nested",
    "dags-nested": "parallelism-nested-dag",
}


def run_examples(root: Path) -> dict[str, Path]:
    """Each example run under ``root/runs`` by the name EXAMPLES gives it; its directory."""
    found = {}
    for name, source in EXAMPLES.items():
        manifest = no_sleep(example(source))
        manifest["metadata"] = {**manifest["metadata"], "name": name}
        runner = LocalRunner(
            manifest, root / "runs", cache_dir=root / "cache", cwd=root, on_save=PageWriter()
        )
        runner.run()
        found[name] = runner.run_dir
    return found


@dataclass
class Browser:
    """A Chromium page per call of ``open``; every request recorded, any to another
    machine refused and recorded."""

    browser: Any
    allowed: tuple[str, ...] = ("file://", "http://127.0.0.1:")
    requests: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def open(self, url: str, width: int = 1300, height: int = 900) -> Any:
        page = self.browser.new_page(viewport={"width": width, "height": height})
        page.route("**/*", self._route)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.goto(url)
        return page

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.requests.append(url)
        if url.startswith(self.allowed):
            route.continue_()
        else:
            self.refused.append(url)
            route.abort()


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless; the test skips, naming it, where it is not installed."""
    if not Path(CHROMIUM).is_file() and not shutil.which("chromium"):
        pytest.skip("chromium is not installed (apt-get install chromium): the page tests need it")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright ([dev])")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium"),
            headless=True,
        )
        try:
            yield Browser(browser)
        finally:
            browser.close()


def drawn(page: Any) -> dict[str, dict[str, str]]:
    """Every node the page drew: its Argo node id -> its phase class, label and fill."""
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('g.node')].map(g => [
            g.dataset.id, {
              classes: g.getAttribute('class'),
              genre: g.dataset.genre,
              label: g.querySelector('title').textContent,
              fill: getComputedStyle(g.querySelector('circle.bg')).fill,
              hidden: g.dataset.hidden || ''}]))"""
    )


def check_argo_shape(workflow: dict[str, Any], state: dict[str, Any]) -> None:
    """``get -o json`` holds only fields of Argo's Workflow, WorkflowStatus, NodeStatus,
    Inputs and Outputs (the v4.0.5 JSON schema), each node keyed by the id Argo's
    controller gives its name, its children among the nodes, and every record of
    state.json a node with the phase, message and start the run recorded."""
    if not SCHEMA.is_file():
        pytest.skip(f"{SCHEMA} is not here (../shared): Argo's v4.0.5 schema is needed")
    definitions = json.loads(SCHEMA.read_text())["definitions"]
    fields = {
        kind: set(definitions[f"io.argoproj.workflow.v1alpha1.{kind}"]["properties"])
        for kind in ("Workflow", "WorkflowStatus", "NodeStatus", "Outputs", "Inputs")
    }
    name, status = workflow["metadata"]["name"], workflow["status"]
    assert set(workflow) <= fields["Workflow"] and set(status) <= fields["WorkflowStatus"]
    for ident, node in status["nodes"].items():
        assert set(node) <= fields["NodeStatus"], (ident, set(node) - fields["NodeStatus"])
        assert set(node.get("outputs", {})) <= fields["Outputs"]
        assert set(node.get("inputs", {})) <= fields["Inputs"]
        assert ident == node["id"] == node_id(name, node["name"])
        assert all(child in status["nodes"] for child in node["children"])
    records = {
        **state["tasks"],
        **({"onExit": state["exit_handler"]} if state.get("exit_handler") else {}),
    }
    for key, record in records.items():
        full = name if key == name else name + key if key.startswith("[") else f"{name}.{key}"
        node = status["nodes"][node_id(name, full)]
        phase = "Succeeded" if record["state"] == "Cached" else record["state"]
        assert (node["phase"], node.get("message", "")) == (phase, record["message"]), key
        if record["started"]:
            started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["started"]))
            assert node["startedAt"] == started, key


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``python flows/cifar.py ARGV`` for a review verb, in this process: exit code, out, err."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
