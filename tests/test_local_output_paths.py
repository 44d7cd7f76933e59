"""Issue #24: a local run moves exactly the paths a template declares for its outputs (and a
directory holding them, named whole) to the task's directory; every other path in its
command, args, env and script source stays as written, wherever this checkout, the data
or the tools are, /tmp included.

In a pod each path exists as written and Argo's executor reads the declared outputs back
after the main container exits (argoproj/argo-workflows v4.0.5,
workflow/executor/executor.go ``SaveParameters`` / ``SaveArtifacts``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.local.pods.output_paths import OutputPaths
from tests.helpers.cifar_files import write_cifar_tarball
from tests.helpers.local_examples import EXAMPLES, run, states

R = Path("/run/tasks/a")
DECLARED = {
    "outputs": {
        "parameters": [
            {"name": "o", "valueFrom": {"path": "/tmp/output.txt"}},
            {"name": "id", "valueFrom": {"path": "/tmp/outputs/run_id"}},
        ],
        "artifacts": [{"name": "report", "path": "/tmp/report"}],
    }
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/tmp/output.txt", f"{R}/outputs/tmp/output.txt"),
        ("/tmp/output.txt.bak", "/tmp/output.txt.bak"),
        ("python /tmp/x/main/argosay.py echo hi /tmp/output.txt",
         f"python /tmp/x/main/argosay.py echo hi {R}/outputs/tmp/output.txt"),
        ("/tmp/outputs", f"{R}/outputs/tmp/outputs"),
        ("--outputs-dir=/tmp/outputs/", f"--outputs-dir={R}/outputs/tmp/outputs/"),
        ("data.source=/tmp/outputs-x/cifar.tar.gz", "data.source=/tmp/outputs-x/cifar.tar.gz"),
        ("/tmp/outputs/other", "/tmp/outputs/other"),
        ("/tmp/report/a/b.png", f"{R}/outputs/tmp/report/a/b.png"),
        ("/tmp/report-old", "/tmp/report-old"),
        ("/usr/bin:/tmp/bin:/tmp", f"/usr/bin:/tmp/bin:{R}/outputs/tmp"),
        ("cd /tmp && cat '/tmp/output.txt'",
         f"cd {R}/outputs/tmp && cat '{R}/outputs/tmp/output.txt'"),
        ("file:///tmp/output.txt", f"file://{R}/outputs/tmp/output.txt"),
        ("s3://bucket/tmp/output.txt", "s3://bucket/tmp/output.txt"),
        ("/data/tmp/output.txt", "/data/tmp/output.txt"),
        ("/", "/"),
    ],
    ids=[
        "the declared file", "a longer name", "a command under /tmp", "the directory named whole",
        "the directory after =", "a sibling with the same start", "an undeclared file beside",
        "inside a declared directory", "beside a declared directory", "PATH-like list",
        "shell words and quotes", "a file URI", "an S3 key", "another tree", "the root",
    ],
)  # fmt: skip
def test_only_declared_paths_and_their_directories_named_whole_move(
    text: str, expected: str
) -> None:
    assert OutputPaths.of(DECLARED, R).rewrite(text) == expected


@pytest.fixture
def under_tmp() -> Iterator[Path]:
    """A fresh directory right under /tmp: where most of Argo's examples write their outputs,
    and where a user's checkout, tools and data may be too (``/tmp/outputs-...``)."""
    path = Path(tempfile.mkdtemp(prefix="outputs-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def workflow(template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {
            "entrypoint": "main",
            "templates": [{"name": "main", "dag": {"tasks": [{"name": "a", "template": "t"}]}},
                          {"name": "t", **template}],
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("run_stage_b", "status", "phases"),
    [
        ("false", "Error", {"stage-a": "Succeeded", "stage-b": "Skipped", "stage-c": "Error"}),
        ("true", "Succeeded", dict.fromkeys(["stage-a", "stage-b", "stage-c"], "Succeeded")),
    ],
)
def test_an_argo_example_writing_tmp_output_runs_from_a_checkout_under_tmp(
    tmp_path: Path, under_tmp: Path, run_stage_b: str, status: str, phases: dict[str, str]
) -> None:
    """dag-skipped-output-ref.yaml (test/e2e/functional: Error when stage-b is Skipped) writes
    /tmp/output.txt; its argosay helper lies in a checkout under /tmp, as after
    ``git clone ... /tmp/x/main``: the command keeps its path, the output alone moves."""
    helper = under_tmp / "main" / "tests" / "argo_examples" / "argosay.py"
    helper.parent.mkdir(parents=True)
    shutil.copy(EXAMPLES / "argosay.py", helper)
    manifest = yaml.safe_load((EXAMPLES / "dag-skipped-output-ref.yaml").read_text())
    manifest["spec"]["arguments"]["parameters"][0]["value"] = run_stage_b
    for template in manifest["spec"]["templates"]:
        if "container" in template:
            template["container"]["command"] = ["python", str(helper)]
    _, result = run(tmp_path, manifest)
    assert (result.status, states(result)) == (status, phases)
    written = result.run_dir / "tasks" / "stage-a" / "outputs" / "tmp" / "output.txt"
    assert written.read_text() == "hello from stage A"
    if run_stage_b == "true":
        log = (result.run_dir / "logs" / "stage-c.log").read_text()
        assert "[hello from stage A] and [hello from stage B]" in log


def test_a_command_and_path_under_tmp_stay_while_tmp_output_txt_moves(
    tmp_path: Path, under_tmp: Path
) -> None:
    """A tool on a PATH under /tmp reading data under /tmp, writing /tmp/output.txt."""
    (under_tmp / "bin").mkdir()
    tool = under_tmp / "bin" / "shout"
    tool.write_text('#!/bin/sh\ntr a-z A-Z < "$DATA" > "$1"\n')
    tool.chmod(0o755)
    (under_tmp / "data.txt").write_text("from the data\n")
    env = [
        {"name": "PATH", "value": f"{under_tmp}/bin:{os.environ['PATH']}"},
        {"name": "DATA", "value": f"{under_tmp}/data.txt"},
    ]
    container = {"image": "i", "command": ["sh", "-c", "shout /tmp/output.txt"], "env": env}
    outputs = {"parameters": [{"name": "o", "valueFrom": {"path": "/tmp/output.txt"}}]}
    _, result = run(tmp_path, workflow({"container": container, "outputs": outputs}))
    assert result.status == "Succeeded", result.tasks["a"].tail
    assert result.tasks["a"].outputs == {"o": "FROM THE DATA"}


@pytest.mark.parametrize(
    ("build", "status", "outcome"),
    [
        ("d={out}; echo built > $d/built.txt", "Succeeded", "moved"),
        ("d={out}/bui; echo built > ${{d}}lt.txt", "Failed", "written where it says"),
    ],
    ids=["directory named whole", "path built from pieces"],
)
def test_a_declared_path_the_process_builds_at_run_time(
    tmp_path: Path, under_tmp: Path, build: str, status: str, outcome: str
) -> None:
    """A directory named whole is moved, so what the process builds inside it is too; a
    path built from pieces that name neither is not: the output is missing, and says why."""
    out = under_tmp / "out"
    out.mkdir()
    container = {"image": "i", "command": ["sh", "-c", build.format(out=out)]}
    outputs = {"parameters": [{"name": "o", "valueFrom": {"path": f"{out}/built.txt"}}]}
    _, result = run(tmp_path, workflow({"container": container, "outputs": outputs}))
    assert result.status == status
    if outcome == "moved":
        assert result.tasks["a"].outputs == {"o": "built"}
        assert not (out / "built.txt").exists()
    else:
        assert (out / "built.txt").read_text() == "built\n"
        assert f"output parameter o: {out}/built.txt was not written" in result.tasks["a"].message
        assert "not one the process builds from other pieces" in result.tasks["a"].message


def test_a_script_source_and_a_directory_artifact_move_their_siblings_stay(
    tmp_path: Path, under_tmp: Path
) -> None:
    """Argo's script templates write their outputs from the source (examples/scripts-*.yaml,
    output-parameter.yaml): the source is rewritten as the args are."""
    (under_tmp / "report-old").write_text("kept")
    source = f"""import pathlib
pathlib.Path("{under_tmp}/n").write_text("41")
report = pathlib.Path("{under_tmp}/report")
report.mkdir()
(report / "old.txt").write_text(pathlib.Path("{under_tmp}/report-old").read_text())
"""
    template = {
        "script": {"image": "python:3.12", "command": ["python"], "source": source},
        "outputs": {
            "parameters": [{"name": "n", "valueFrom": {"path": f"{under_tmp}/n"}}],
            "artifacts": [{"name": "report", "path": f"{under_tmp}/report"}],
        },
    }
    _, result = run(tmp_path, workflow(template))
    assert result.status == "Succeeded", result.tasks["a"].tail
    assert result.tasks["a"].outputs == {"n": "41"}
    assert (result.run_dir / "artifacts" / "a" / "report" / "old.txt").read_text() == "kept"
    assert sorted(p.name for p in under_tmp.iterdir()) == ["report-old"]


def test_the_pipeline_stage_reads_a_data_source_under_tmp_outputs_x(
    tmp_path: Path, under_tmp: Path
) -> None:
    """flows/cifar.py's own stage template (``--outputs-dir /tmp/outputs``, outputs
    /tmp/outputs/<name>) with ``data-source`` /tmp/outputs-<...>/cifar.tar.gz: the data
    is read where it is, the outputs directory moves."""
    from flows.cifar import build_template
    from steps.common.config import REPO_ROOT, load_config

    tarball = under_tmp / "cifar-10-python.tar.gz"
    write_cifar_tarball(tarball, per_batch=10, seed=1)
    cfg = load_config(REPO_ROOT / "configs" / "smoke.yaml", ["data.md5=none"])
    spec = build_template(cfg).to_dict()["spec"]
    stage = next(t for t in spec["templates"] if t["name"] == "stage")
    manifest = workflow({k: v for k, v in stage.items() if k != "name"})
    arguments = [p for p in spec["arguments"]["parameters"] if p["name"] != "data-source"]
    arguments.append({"name": "data-source", "value": str(tarball)})
    manifest["spec"]["arguments"] = {"parameters": arguments}
    _, result = run(tmp_path, manifest)
    assert result.status == "Succeeded", result.tasks["a"].tail
    assert result.tasks["a"].outputs["num-train"] == "50"
    outputs = result.run_dir / "tasks" / "a" / "outputs" / "tmp" / "outputs"
    assert (outputs / "dataset_uri").read_text().startswith("file://")
    assert (outputs / "summary.json").is_file()  # not declared: stays with the task, as in a pod
