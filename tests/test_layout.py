"""The design's import rules hold on the code as it stands (docs/architecture.md, "Who may
import whom"), and the checker finds a violation of each when one is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.import_graph import RULES, read_graph

GRAPH = read_graph(REPO_ROOT)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_code_keeps_the_import_rule(rule) -> None:
    assert rule(GRAPH) == [], rule.__doc__


def test_every_step_runs_as_a_module() -> None:
    for step in ("stage_data", "train", "optimize", "benchmark"):
        assert (REPO_ROOT / "steps" / step / "__main__.py").is_file(), step
    assert "steps.stage_data.step" in GRAPH and "steps.common" in GRAPH


BROKEN = {  # a tiny tree per rule that breaks it, and the words the rule reports
    "step_imports_only_common_and_itself": (
        {"steps/train/fit.py": "from steps.optimize.variants import Spec\n"},
        "steps.train.fit imports steps.optimize.variants (another step)",
    ),
    "common_imports_no_step_or_flow": (
        {"steps/common/tracking.py": "import flows.cli\n"},
        "steps.common.tracking imports flows.cli",
    ),
    "local_runner_imports_no_step_code": (
        {"flows/local/runner.py": "from steps.common.config import load_config\n"},
        "flows.local.runner imports steps.common.config",
    ),
    "staging_never_imports_torch": (
        {
            "steps/stage_data/step.py": "from steps.common.models import build_model\n",
            "steps/common/models.py": "import torch\n",
        },
        "steps.stage_data.step -> steps.common.models imports torch",
    ),
    "import_cycles": (
        {
            "flows/local/runner.py": "def f():\n    from flows.local.view import g\n",
            "flows/local/view.py": "from flows.local.runner import f\n",
        },
        "flows.local.runner <-> flows.local.view",
    ),
}


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_checker_finds_a_broken_rule(rule, tmp_path: Path) -> None:
    files, words = BROKEN[rule.__name__]
    for package in ("steps", "flows", "steps/common", "steps/stage_data", "steps/train"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = rule(read_graph(tmp_path))
    assert any(words in line for line in found), found
