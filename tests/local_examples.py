"""Argo's own example workflows (tests/argo_examples/) and the small helpers every local
runner test file uses to run one and read how it ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flows.local.workflow import LocalRunner

EXAMPLES = Path(__file__).parent / "argo_examples"


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
