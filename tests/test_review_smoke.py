"""Issue 41 on the suite's shared smoke run (conftest.py's ``smoke_run``: the pipeline
failed at staging, then resumed to the end): ``list``, ``get`` and ``logs`` print it as the
run recorded it, the copy of its failed run as it failed; both pages in a real headless
Chromium (screenshots kept in the test's temp folder); the page in the MLflow run; the
closing lines' ``get`` and ``logs`` commands run as printed."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from flows.local.review import humanize
from flows.local.review.argo_workflow import workflow_status
from flows.local.review.node_tree import pod_name
from tests.helpers.pipeline_runs import state_of
from tests.helpers.review_helpers import PHASE_FILL, check_argo_shape, chromium, cli, drawn

STEPS = ["create-run", "stage", "train", "optimize", "benchmark", "deploy", "serve-check"]


def whole_seconds(value: float | None) -> float | None:
    """A recorded time as Argo keeps it (metav1.Time: whole seconds)."""
    return None if value is None else float(int(value))


def tree_rows(out: str) -> dict[str, list[str]]:
    """get's node rows by display name: the cells after the glyphs and icon."""
    rows = {}
    for line in out.split("\n\n", 1)[1].splitlines()[1:]:
        cells = re.split(r" {2,}", re.sub(r"^[ │├└┬─]*(\S) ", r"\1 ", line).strip())
        if cells and cells[0]:
            icon, name = cells[0].split(" ", 1)
            rows[name] = [icon, *cells[1:]]
    return rows


def test_list_get_and_logs_print_the_smoke_run_as_it_ran(smoke_run, capsys) -> None:
    run, _ = smoke_run
    assert run.resumed.returncode == 0, run.resumed.stderr[-3000:]
    state = state_of(run.run_dir)
    name, runs_dir = run.run_dir.name, str(run.run_dir.parent)
    # the workflow started when the resumed run's entrypoint did (argo retry restarts the
    # workflow's clock: workflow/util/util.go createNewRetryWorkflow) and ended with the
    # last node, its exit handler's
    records = [*state["tasks"].values(), state["exit_handler"]]
    started = whole_seconds(state["root"]["started"])
    finished = whole_seconds(max(r["finished"] for r in records if r["finished"]))
    assert started > whole_seconds(run.failed_state["root"]["started"])
    # list: its row (a second run of the memo test may stand beside it)
    code, out, _ = cli(capsys, "list", "--runs-dir", runs_dir)
    (row,) = [line.split() for line in out.splitlines() if line.startswith(name + " ")]
    assert code == 0 and row[1] == "Succeeded" and row[4] == "0"
    assert row[3] == humanize.short(started, finished)
    # get: each step's phase, pod, duration and message as recorded; the resumed run kept
    # create-run with its times from the failed run (as argo retry keeps a node)
    assert (
        state["tasks"]["create-run"]["started"]
        == run.failed_state["tasks"]["create-run"]["started"]
    )
    code, out, _ = cli(capsys, "get", name, "--runs-dir", runs_dir)
    assert code == 0 and re.search(r"^Status: +Succeeded$", out, re.M)
    assert re.search(rf"^Duration: +{humanize.long(started, finished)}$", out, re.M)
    rows = tree_rows(out)
    for step in STEPS:
        record = state["tasks"][step]
        duration = humanize.short(
            whole_seconds(record["started"]), whole_seconds(record["finished"])
        )
        pod = pod_name(name, f"{name}.{step}", record["template"])
        assert rows[step][:4] == ["✔", record["template"], pod, duration], step
    assert rows["train-multinode"] == ["○", "train-multinode", "when '1 > 1' evaluated false"]
    # Omitted nodes of type Skipped are left out of the tree, as argo get's filterNode does
    assert not {"rollback-alias", "rollback-apply", "rollback-delete"} & set(rows)
    assert rows[f"{name}.onExit"][:2] == ["✔", "exit-handler"]
    assert rows["close-run"][0] == "✔" and rows["delete-train-job"][0] == "○"
    # -o json: Argo's shape, every record a node as recorded
    code, out, _ = cli(capsys, "get", name, "--runs-dir", runs_dir, "-o", "json")
    workflow = json.loads(out)
    check_argo_shape(workflow, state)
    outputs = {p["name"]: p["value"] for p in workflow["status"]["outputs"]["parameters"]}
    assert outputs["mlflow-run-id"] == run.run_id
    # logs: the stage's log, each line after its name; both attempts (the failed one too)
    code, out, _ = cli(capsys, "logs", name, "stage", "--runs-dir", runs_dir)
    log = (run.run_dir / "logs" / "stage.log").read_text().splitlines()
    assert out.splitlines() == [f"stage: {line}" for line in log]
    assert sum(line.startswith("stage: --- attempt 1:") for line in out.splitlines()) == 2


def test_the_failed_run_reads_as_it_failed(smoke_run, capsys) -> None:
    """The copy of the run as staging's failure left it."""
    run, _ = smoke_run
    state = state_of(run.failed_dir)
    assert state == run.failed_state
    runs_dir = str(run.failed_dir.parent)
    code, out, _ = cli(capsys, "list", "--runs-dir", runs_dir, "--completed")
    assert code == 0 and out.splitlines()[1].split()[:2] == [run.failed_dir.name, "Failed"]
    code, out, _ = cli(capsys, "get", str(run.failed_dir))
    rows = tree_rows(out)
    stage = state["tasks"]["stage"]
    assert rows["stage"][0] == "✖" and rows["stage"][-1] == stage["message"]
    assert stage["message"].startswith("exited with code ")
    assert rows["create-run"][0] == "✔"
    assert "train" not in rows and "optimize" not in rows  # Omitted: left out of the tree
    workflow = json.loads(cli(capsys, "get", str(run.failed_dir), "-o", "json")[1])
    check_argo_shape(workflow, state)
    phases = {n["displayName"]: n["phase"] for n in workflow["status"]["nodes"].values()}
    assert phases["train"] == phases["optimize"] == "Omitted" and phases["stage"] == "Failed"
    assert workflow["status"]["phase"] == "Failed"
    out = cli(capsys, "logs", str(run.failed_dir), "stage")[1]
    assert re.search(r"^stage: .*truncated or not a gzip tarball", out, re.M)


def open_and_check(browser: Any, run_dir: Path, shot: Path) -> Any:
    """The run's page: every node the Argo UI draws, in its phase's colour; stage's
    panel; a screenshot."""
    nodes = workflow_status(json.loads((run_dir / "state.json").read_text()))["status"]["nodes"]
    page = browser.open((run_dir / "index.html").as_uri())
    shown = drawn(page)
    expected = {i for i, n in nodes.items() if n["type"] not in ("StepGroup", "TaskGroup")}
    assert set(shown) == expected
    for ident in expected:
        assert shown[ident]["fill"] == PHASE_FILL[nodes[ident]["phase"]], nodes[ident]["name"]
    (stage,) = [i for i, n in nodes.items() if n["displayName"] == "stage"]
    page.locator(f'g.node[data-id="{stage}"]').click()
    log = (run_dir / "logs" / "stage.log").read_text().splitlines()
    assert page.locator("#panel pre.log-tail").inner_text().splitlines() == log[-40:]
    at_end = """() => { const pre = document.querySelector('#panel pre.log-tail');
                       return pre.scrollHeight > pre.clientHeight &&
                              pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 1; }"""
    assert page.evaluate(at_end)  # a long tail shows its last line
    page.screenshot(path=str(shot), full_page=True)
    return page


def test_the_smoke_run_pages_show_the_dag_in_a_browser(smoke_run, tmp_path: Path) -> None:
    run, _ = smoke_run
    state = state_of(run.run_dir)
    with chromium() as browser:
        page = open_and_check(browser, run.run_dir, tmp_path / "smoke-run-page.png")
        links = {a.inner_text(): a.get_attribute("href") for a in page.locator("header a").all()}
        assert links["MLflow run"] == state["globals"]["workflow.outputs.parameters.mlflow-run-url"]
        assert (run.run_dir / links["benchmark report"]).is_file()
        # the endpoint stopped with the run: named, no link
        assert page.locator("header .links span.off").inner_text().endswith("(Stopped)")
        failed = open_and_check(browser, run.failed_dir, tmp_path / "failed-run-page.png")
        tail = failed.locator("#panel pre.log-tail").inner_text()
        assert "truncated or not a gzip tarball" in tail
        assert failed.locator("#phase").inner_text() == "Failed"
    pages = {(d / "index.html").as_uri() for d in (run.run_dir, run.failed_dir)}
    assert {r.split("#")[0] for r in browser.requests} == pages  # nothing else asked for
    assert browser.refused == [] and browser.errors == []
    print(f"screenshots: {tmp_path / 'smoke-run-page.png'} {tmp_path / 'failed-run-page.png'}")


def test_the_page_is_an_artifact_of_the_mlflow_run(smoke_run, tmp_path: Path) -> None:
    run, mlflow = smoke_run
    assert "The run's page is in its MLflow run too: workflow/index.html" in run.resumed.stderr
    (artifact,) = mlflow.list_artifacts(run.run_id, "workflow")
    assert artifact.path == "workflow/index.html"
    local = Path(mlflow.download_artifacts(run.run_id, artifact.path, str(tmp_path)))
    data = re.search(
        r'<script id="run-data" type="application/json">(.*?)</script>', local.read_text()
    )
    assert data
    status = json.loads(data.group(1))["workflow"]["status"]
    assert status["phase"] == "Succeeded"  # the page as the run ended, not the failed one's


def test_the_closing_lines_name_get_logs_and_the_page_and_run_as_printed(smoke_run) -> None:
    run, _ = smoke_run
    lines = run.resumed.stderr.splitlines()
    review = next(line for line in lines if "review it as argo would: " in line)
    get, logs = review.split("review it as argo would: ", 1)[1].split(", ")
    page = next(line for line in lines if line.strip().startswith("its page (the DAG"))
    assert f"runs/{run.run_dir.name}/index.html" in page and lines.index(page) > lines.index(
        "Next:"
    )
    shell = {**run.env, "PATH": "/usr/bin:/bin"}
    for command, expected in (
        (get, "Status:              Succeeded"),
        (logs.split(" (")[0], "stage: "),
    ):
        done = subprocess.run(["/bin/sh", "-c", command], cwd=run.cwd, env=shell,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0 and expected in done.stdout, (command, done.stderr[-2000:])
    # after the failure: the failed task's log named
    failed = next(line for line in run.failed.stderr.splitlines() if "review it as argo" in line)
    assert failed.endswith(f"logs {run.run_dir.name} stage")
