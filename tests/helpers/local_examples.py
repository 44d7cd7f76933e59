"""Argo's own example workflows (tests/argo_examples/) and the small helpers every local
runner test file uses to run one and read how it ended, or to write one (``sh``,
``steps_workflow``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flows.local.workflow import LocalRunner

EXAMPLES = Path(__file__).parents[1] / "argo_examples"


def example(name: str) -> dict[str, Any]:
    """An Argo example as published (``name`` without ``.yaml``)."""
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


def run(tmp_path: Path, manifest: dict[str, Any], **kwargs: Any):
    """The runner and how the run ended; the cache and the working directory in tmp_path."""
    runner = LocalRunner(
        manifest, tmp_path / "runs", cache_dir=tmp_path / "cache", cwd=tmp_path, **kwargs
    )
    return runner, runner.run()


def states(result) -> dict[str, str]:
    """Each node's phase, by name."""
    return {name: node.state.value for name, node in result.tasks.items()}


def sh(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "container": {"image": "i:1", "command": ["sh", "-c", script]}, **extra}


def steps_workflow(groups: list[list[dict]], templates: list[dict], **spec: Any) -> dict:
    main = {"name": "main", "steps": groups}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {"entrypoint": "main", "templates": [main, *templates], **spec},
    }
