"""Issue 41: a run's page (runs/<name>/index.html) in a real headless Chromium, and ``ui``
over HTTP. The pages of runs of Argo's own examples (conftest.py's ``example_runs``: loops
in steps in loops, DAGs in a DAG, a failed DAG with a retried task): every node the Argo
UI draws is drawn with its phase's colour (argo-workflows v4.0.5 ui/src/shared/components/
graph/graph-panel.scss over argo-ui's config.scss), loop groups of more than 3 collapsed
until clicked (workflow-dag.tsx), a click shows the node's log end, no request leaves the
page; a page follows its run while it goes; ``ui`` answers GET and HEAD only and writes
nothing. The smoke run's pages: tests/test_review_smoke.py."""

from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flows.local.review.argo_workflow import workflow_status
from flows.local.review.commands import build_parser
from flows.local.review.page import PageWriter
from flows.local.review.runs import load_state
from flows.local.review.server import serve_in_background
from flows.local.workflow import LocalRunner
from tests.helpers import review_helpers
from tests.helpers.paths import REPO_ROOT
from tests.helpers.review_helpers import PHASE_FILL, chromium, drawn

NOT_DRAWN = ("StepGroup", "TaskGroup")  # genres.ts: false


def argo_nodes(run_dir: Path) -> dict[str, dict[str, Any]]:
    return workflow_status(load_state(run_dir))["status"]["nodes"]


def test_every_node_of_argo_examples_is_drawn_in_its_phase_colour(example_runs) -> None:
    """Loops of 4 (parallelism-nested: each group shows its first and last item and "2
    hidden nodes" until that node is clicked), DAGs in a DAG, a failed DAG: once every
    group is open, every node but StepGroups and TaskGroups is drawn, coloured as the Argo
    UI colours its phase; nothing is fetched but the page itself."""
    with chromium() as browser:
        for name in ("loops-nested", "dags-nested", "fail-fast-off", "loops-dag"):
            nodes = argo_nodes(example_runs[name])
            expected = {i for i, n in nodes.items() if n["type"] not in NOT_DRAWN}
            url = (example_runs[name] / "index.html").as_uri()
            page = browser.open(url)
            shown = drawn(page)
            groups = {k: v for k, v in shown.items() if v["genre"] == "Collapsed"}
            if name == "loops-nested":  # the outer loop's 4 items: the first, the last, 2 hidden
                outer = [v for v in groups.values() if "2 hidden nodes" in v["label"]]
                assert len(outer) >= 1 and all(len(v["hidden"].split()) == 2 for v in outer)
            for group in groups.values():  # hidden: not drawn, and all of them real nodes
                assert set(group["hidden"].split()) <= expected - set(shown)
            clicks = 0
            while any(v["genre"] == "Collapsed" for v in shown.values()):
                page.locator('g.node[data-genre="Collapsed"]').first.click()
                shown, clicks = drawn(page), clicks + 1
            assert set(shown) == expected, name
            for ident in expected:
                phase = nodes[ident]["phase"]
                assert shown[ident]["fill"] == PHASE_FILL[phase], (name, ident, phase)
                assert phase in shown[ident]["classes"].split()
            assert (name == "loops-nested") == (clicks > 0)
            page.close()
            assert browser.requests[-1] == url
    assert browser.refused == [] and browser.errors == []
    assert {r.split("#")[0] for r in browser.requests} == {
        (example_runs[n] / "index.html").as_uri()
        for n in ("loops-nested", "dags-nested", "fail-fast-off", "loops-dag")
    }


def test_a_click_on_a_node_shows_its_template_attempts_and_log_end(example_runs) -> None:
    """The failed DAG's C failed after 4 attempts (exit 2): its panel."""
    run_dir = example_runs["fail-fast-off"]
    nodes = argo_nodes(run_dir)
    (c,) = [i for i, n in nodes.items() if n["displayName"] == "C"]
    with chromium() as browser:
        page = browser.open((run_dir / "index.html").as_uri())
        assert page.locator("#panel").is_hidden()
        page.locator(f'g.node[data-id="{c}"]').click()
        panel = page.locator("#panel")
        assert panel.is_visible()
        rows = dict(
            (r.locator("td").nth(0).inner_text(), r.locator("td").nth(1).inner_text())
            for r in panel.locator("table").first.locator("tr").all()
        )
        assert rows["phase"] == "Failed" and rows["template"] == "c"
        assert rows["message"] == "exited with code 2 after 4 attempt(s)"
        assert (rows["attempts"], rows["retries"], rows["exit code"]) == ("4", "3", "2")
        log = (run_dir / "logs" / "C.log").read_text().splitlines()
        assert panel.locator("pre.log-tail").inner_text().splitlines() == log[-40:]
        assert "exit 2" in panel.locator("pre.template").inner_text()
        assert panel.locator("a", has_text="whole log").get_attribute("href") == "logs/C.log"
        assert re.search(r"node=", page.url)  # the selection survives a reload
    assert browser.refused == [] and browser.errors == []


def slow_run(tmp_path: Path, name: str) -> LocalRunner:
    """A DAG whose first task writes a line every 0.3 s for 5 s, then a second task."""
    script = "for i in $(seq 16); do echo line $i; sleep 0.3; done"
    manifest = {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name},
        "spec": {"entrypoint": "main", "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "a", "template": "slow"},
                                               {"name": "b", "template": "quick",
                                                "depends": "a"}]}},
            {"name": "slow", "container": {"image": "i:1", "command": ["sh", "-c", script]}},
            {"name": "quick", "container": {"image": "i:1", "command": ["echo", "done"]}},
        ]},
    }  # fmt: skip
    return LocalRunner(
        manifest, tmp_path / "runs", cache_dir=tmp_path / "cache", cwd=tmp_path,
        on_save=PageWriter(),
    )  # fmt: skip


def test_a_page_follows_its_run_while_it_goes(tmp_path: Path) -> None:
    """Written when the run starts, rewritten as nodes change: the page served by ``ui``
    (it asks for itself) and the file itself (it reloads) both end showing the finished
    run, having shown it Running."""
    runner = slow_run(tmp_path, "follow")
    server, _ = serve_in_background(tmp_path / "runs")
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        page_file = runner.run_dir / "index.html"
        deadline = time.monotonic() + 30
        while not page_file.is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        with chromium() as browser:
            served = browser.open(f"{server.url}runs/follow/")
            local = browser.open(page_file.as_uri())
            for page in (served, local):
                assert page.locator("#phase").inner_text() == "Running"
            for page in (served, local):  # page.wait_for_function would need eval: the
                wait_for_text(page, "#phase", "Succeeded")  # page's policy refuses it
            for page in (served, local):
                shown = {v["label"]: v for v in drawn(page).values()}
                assert shown["b (Succeeded)"]["fill"] == PHASE_FILL["Succeeded"]
            requests = set(browser.requests)
            assert browser.refused == [] and browser.errors == []
    finally:
        thread.join(timeout=60)
        server.shutdown()
        server.server_close()
    # the served page asked for itself again (polling), the file reloaded itself
    assert requests <= {f"{server.url}runs/follow/", page_file.as_uri()}


def wait_for_text(page: Any, selector: str, text: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while page.locator(selector).inner_text() != text:
        assert time.monotonic() < deadline, page.locator(selector).inner_text()
        page.wait_for_timeout(100)


def fetch(url: str, method: str = "GET", path: str = "/") -> tuple[int, dict[str, str], bytes]:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request(method, path, body=b"x" if method in ("POST", "PUT", "PATCH") else None)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), body


def page_data(body: bytes) -> dict[str, Any]:
    match = re.search(rb'<script id="run-data" type="application/json">(.*?)</script>', body)
    assert match
    return json.loads(match.group(1))


def test_ui_answers_its_list_and_pages_and_refuses_every_other_method(example_runs) -> None:
    """GET and HEAD of the list, a run's page, a log; 404 for what is not a run's; 405
    (Allow: GET, HEAD) for any other method; nothing under runs/ written or changed."""
    runs_dir = example_runs["loops-dag"].parent
    before = {p: p.read_bytes() for p in runs_dir.rglob("*") if p.is_file()}
    server, _ = serve_in_background(runs_dir)
    try:
        status, headers, body = fetch(server.url)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        listed = {r["name"]: r["phase"] for r in page_data(body)["runs"]}
        assert listed == {
            n: workflow_status(load_state(d))["status"]["phase"] for n, d in example_runs.items()
        }
        status, _, body = fetch(server.url, path="/runs/loops-dag/")
        workflow = page_data(body)["workflow"]
        assert status == 200 and workflow["metadata"]["name"] == "loops-dag"
        assert set(workflow["status"]["nodes"]) == set(argo_nodes(example_runs["loops-dag"]))
        status, headers, body = fetch(server.url, "HEAD", "/runs/loops-dag/index.html")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 1000
        status, headers, _ = fetch(server.url, path="/runs/loops-dag")
        assert (status, headers["Location"]) == (301, "/runs/loops-dag/")
        status, headers, body = fetch(server.url, path="/runs/loops-dag/logs/A.log")
        assert status == 200 and headers["Content-Type"] == "text/plain; charset=utf-8"
        assert body == (example_runs["loops-dag"] / "logs" / "A.log").read_bytes()
        outside = ("/runs/nope/", "/runs/loops-dag/../exit-handlers/state.json", "/etc/passwd",
                   "/runs/loops-dag/%2e%2e/%2e%2e/etc/passwd", "/favicon.ico")  # fmt: skip
        for path in outside:
            assert fetch(server.url, path=path)[0] == 404, path
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND"):
            for path in ("/", "/runs/loops-dag/", "/runs/loops-dag/state.json"):
                status, headers, _ = fetch(server.url, method, path)
                assert (status, headers.get("Allow")) == (405, "GET, HEAD"), (method, path)
    finally:
        server.shutdown()
        server.server_close()
    after = {p: p.read_bytes() for p in runs_dir.rglob("*") if p.is_file()}
    assert after == before


def test_ui_prints_its_url_and_stops_on_ctrl_c(example_runs) -> None:
    """``flows/cifar.py ui``: argo server's port by default; --port 0 here (any free one)."""
    assert build_parser().parse_args(["ui"]).port == 2746
    runs_dir = example_runs["loops-dag"].parent
    process = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "flows" / "cifar.py"), "ui", "--port", "0",
         "--runs-dir", str(runs_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        url = re.fullmatch(
            rf"Serving {re.escape(str(runs_dir))}/ read-only at (\S+) \(Ctrl-C stops it\)\n", line
        )
        assert url, line
        assert fetch(url.group(1))[0] == 200
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0, process.stderr.read()  # type: ignore[union-attr]


def test_the_page_tests_skip_naming_chromium_where_it_is_absent(monkeypatch) -> None:
    monkeypatch.setattr(review_helpers, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(review_helpers.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match=r"chromium is not installed"), chromium():
        pass


def test_a_memoized_node_is_succeeded_with_its_memoization_status(tmp_path: Path) -> None:
    """A memo hit is a Succeeded node with memoizationStatus.hit (Argo's), drawn with the
    database badge (icon.tsx), ✔ in get."""
    memoize = {"key": "stage-1", "cache": {"configMap": {"name": "memo"}}}
    output = {"name": "v", "valueFrom": {"path": "/tmp/out/v"}}
    command = ["sh", "-c", "echo -n 7 > /tmp/out/v"]
    template = {"name": "t", "memoize": memoize, "outputs": {"parameters": [output]},
                "container": {"image": "i:1", "command": command}}  # fmt: skip
    for name in ("first", "again"):
        manifest = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": name}, "spec": {"entrypoint": "main", "templates": [
                        {"name": "main", "dag": {"tasks": [{"name": "stage", "template": "t"}]}},
                        template]}}  # fmt: skip
        runner = LocalRunner(manifest, tmp_path / "runs", cache_dir=tmp_path / "cache",
                             cwd=tmp_path, on_save=PageWriter())  # fmt: skip
        runner.run()
    assert load_state(runner.run_dir)["tasks"]["stage"]["state"] == "Cached"
    nodes = argo_nodes(runner.run_dir)
    (stage,) = [n for n in nodes.values() if n["displayName"] == "stage"]
    assert stage["phase"] == "Succeeded" and stage["memoizationStatus"]["hit"] is True
    assert stage["memoizationStatus"]["cacheName"] == "memo"
    assert stage["outputs"]["parameters"] == [{"name": "v", "value": "7"}]
    with chromium() as browser:
        page = browser.open((runner.run_dir / "index.html").as_uri())
        node = page.locator(f'g.node[data-id="{stage["id"]}"]')
        assert node.locator("circle.memo").count() == 1
        assert drawn(page)[stage["id"]]["fill"] == PHASE_FILL["Succeeded"]
    assert browser.refused == [] and browser.errors == []
