"""Small workflows for the local runner's loop, parallelism and retry tests: a script
template, a DAG workflow around tasks, and timestamps written by each item so a test reads
how many ran at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.local_examples import example


def sh(name: str, script: str, *inputs: str, **extra: Any) -> dict[str, Any]:
    template = {"name": name, "container": {"image": "i:1", "command": ["sh", "-c", script]}}
    if inputs:
        template["inputs"] = {"parameters": [{"name": n} for n in inputs]}
    return {**template, **extra}


def dag_workflow(tasks: list[dict], templates: list[dict], **spec: Any) -> dict[str, Any]:
    main = {"name": "main", "dag": {"tasks": tasks}, **spec.pop("main", {})}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {"entrypoint": "main", "templates": [main, *templates], **spec},
    }


def max_overlap(lines: list[str], key: str = "") -> int:
    """The most ``start`` lines (with ``key``) seen before their ``end`` lines."""
    running = most = 0
    for line in lines:
        if not line.endswith(key):
            continue
        running += 1 if line.startswith("start") else -1
        most = max(most, running)
    return most


def timed(log: Path, sleep: str = "0.3", tag: str = "") -> str:
    return f"echo start{tag} >> {log}; sleep {sleep}; echo end{tag} >> {log}"


def timed_example(name: str, log: Path, parameter: str) -> dict[str, Any]:
    """Argo's example ``name``, its job template (the third) logging its start and end to
    ``log``, each line tagged with the job's input ``parameter``."""
    manifest = example(name)
    job = manifest["spec"]["templates"][2]["container"]
    job["args"] = [timed(log, tag=f" {{{{inputs.parameters.{parameter}}}}}")]
    return manifest
