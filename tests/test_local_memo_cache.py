"""The local memo cache on small workflows: what it keeps of Argo's memoization (a hit
names the run it came from; ``maxAge: 0s`` runs the step and overwrites the entry, as
Argo's ``Save`` does: v4.0.5 workflow/controller/cache/configmap_cache.go) and what the
command line adds (``--no-cache``, ``--refresh STEP`` and what depends on it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flows import cifar
from flows.cli import main as cli
from flows.cli.here import refreshed_tasks
from flows.local.pods.outputs import json_path
from tests.helpers.local_examples import run, sh, states
from tests.helpers.paths import REPO_ROOT

MEMO = {"cache": {"configMap": {"name": "memo"}}}


def memoized(name: str, log: Path) -> dict[str, Any]:
    """A template that logs each run and outputs ``<its input>@<the workflow that ran it>``,
    memoized by its input, ``maxAge`` from its input ``age``."""
    script = f"echo {name} >> {log}; mkdir -p /tmp/out; "
    script += "echo -n '{{inputs.parameters.x}}@{{workflow.name}}' > /tmp/out/v"
    return sh(
        name,
        script,
        inputs={"parameters": [{"name": "x"}, {"name": "age", "default": "720h"}]},
        outputs={"parameters": [{"name": "v", "valueFrom": {"path": "/tmp/out/v"}}]},
        memoize={
            "key": f"{name}-{{{{inputs.parameters.x}}}}",
            "maxAge": "{{inputs.parameters.age}}",
            **MEMO,
        },
    )


def dag(name: str, tasks: list[dict[str, Any]], templates: list[dict[str, Any]]) -> dict:
    main = {"name": "main", "dag": {"tasks": tasks}}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {"entrypoint": "main", "templates": [main, *templates]},
    }


def chain(name: str, log: Path, age: str = "720h") -> dict:
    """a -> b -> c, and d beside them."""
    tasks = [
        {
            "name": "a",
            "template": "a",
            "arguments": {
                "parameters": [{"name": "x", "value": "1"}, {"name": "age", "value": age}]
            },
        },
        {
            "name": "b",
            "template": "b",
            "depends": "a",
            "arguments": {
                "parameters": [{"name": "x", "value": "{{tasks.a.outputs.parameters.v}}"}]
            },
        },
        {
            "name": "c",
            "template": "c",
            "depends": "b",
            "arguments": {
                "parameters": [{"name": "x", "value": "{{tasks.b.outputs.parameters.v}}"}]
            },
        },
        {"name": "d", "template": "d", "arguments": {"parameters": [{"name": "x", "value": "1"}]}},
    ]
    return dag(name, tasks, [memoized(n, log) for n in "abcd"])


def test_a_hit_hands_on_the_outputs_and_names_the_run_they_came_from(tmp_path: Path) -> None:
    log = tmp_path / "ran.log"
    run(tmp_path, chain("wf-1", log))
    _, second = run(tmp_path, chain("wf-2", log))
    assert set(states(second).values()) == {"Cached"}
    assert second.tasks["a"].outputs == {"v": "1@wf-1"}
    assert second.tasks["c"].outputs == {"v": "1@wf-1@wf-1@wf-1"}
    assert second.tasks["a"].message == "memoized: reused from wf-1"
    assert sorted(log.read_text().split()) == ["a", "b", "c", "d"]  # the first run's only


def test_max_age_zero_runs_the_step_and_its_success_replaces_the_entry(tmp_path: Path) -> None:
    """``maxAge: 0s``: every entry is older, so the step runs; its success is saved under
    the same key, and a later run takes the new outputs (the pipeline's run again after a
    dead hit, flows/pipeline/reuse_templates.py)."""
    log = tmp_path / "ran.log"
    run(tmp_path, chain("wf-1", log))
    _, again = run(tmp_path, chain("wf-2", log, age="0s"))
    assert states(again)["a"] == "Succeeded" and again.tasks["a"].outputs == {"v": "1@wf-2"}
    assert states(again)["b"] == "Succeeded"  # its input is a's new output: a new key
    _, later = run(tmp_path, chain("wf-3", log))
    assert later.tasks["a"].outputs == {"v": "1@wf-2"}
    assert later.tasks["a"].message == "memoized: reused from wf-2"


def test_refresh_runs_a_task_and_what_depends_on_it_no_cache_all(tmp_path: Path) -> None:
    log = tmp_path / "ran.log"
    run(tmp_path, chain("wf-1", log))
    log.write_text("")
    _, refreshed = run(tmp_path, chain("wf-2", log), refresh=["b"])
    assert states(refreshed) == {"a": "Cached", "b": "Succeeded", "c": "Succeeded", "d": "Cached"}
    _, everything = run(tmp_path, chain("wf-3", log), no_cache=True)
    assert set(states(everything).values()) == {"Succeeded"}
    _, after = run(tmp_path, chain("wf-4", log))  # what ran uncached was saved
    assert set(states(after).values()) == {"Cached"}
    assert after.tasks["c"].outputs == {"v": "1@wf-3@wf-3@wf-3"}
    assert sorted(log.read_text().split()) == ["a", "b", "b", "c", "c", "d"]


def test_a_pod_output_default_is_filled_in_as_argo_fills_the_template(tmp_path: Path) -> None:
    """Argo substitutes the whole template before the pod starts, outputs included (v4.0.5
    workflow/common/util.go SubstituteParams): a default for a file the step does not
    write may name the workflow or an input."""
    echo = sh(
        "t",
        "true",
        inputs={"parameters": [{"name": "x"}]},
        outputs={
            "parameters": [
                {
                    "name": "ran",
                    "valueFrom": {
                        "path": "/tmp/out/none",
                        "default": "{{workflow.name}}/{{inputs.parameters.x}}",
                    },
                }
            ]
        },
    )
    task = {
        "name": "t",
        "template": "t",
        "arguments": {"parameters": [{"name": "x", "value": "7"}]},
    }
    _, result = run(tmp_path, dag("wf-d", [task], [echo]))
    assert result.tasks["t"].outputs == {"ran": "wf-d/7"}


def test_a_field_name_holds_a_slash_as_kubectl_reads_an_annotation() -> None:
    """kubectl's JSONPath ends a field name at ``.`` only (client-go util/jsonpath
    parser.go isTerminator): ``cifar-pipeline/model-uri`` is one key."""
    job = {"metadata": {"annotations": {"cifar-pipeline/model-uri": "s3://b/runs/w/model"}}}
    assert (
        json_path(job, "{.metadata.annotations.cifar-pipeline/model-uri}") == "s3://b/runs/w/model"
    )


def test_refresh_train_is_either_training_template() -> None:
    assert refreshed_tasks(["train", "optimize"]) == ["train", "train-multinode", "optimize"]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--render", "--no-cache"], r"--no-cache and --refresh choose what a local run reuses"),
        (
            ["--submit", "--refresh", "train"],
            r"--no-cache and --refresh choose what a local run reuses",
        ),
        (["--refresh", "deploy"], r"argument --refresh: invalid choice: 'deploy'"),
        (
            ["--resubmit", "cifar-x", "-p", "epochs=2"],
            r"--resubmit carries the failed run's parameters",
        ),
        (["--dry-run"], r"--dry-run prints the plan of --resubmit WORKFLOW"),
    ],
)
def test_options_of_reuse_that_do_not_go_together_are_one_line(
    argv: list[str], match: str, capsys
) -> None:
    smoke = str(REPO_ROOT / "configs" / "smoke.yaml")
    try:
        code = cli.main(["--config", smoke, *argv], cifar)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # argparse's usage comes first
    assert re.search(match, last), last
