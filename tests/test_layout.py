"""The design's import rules hold on the code as it stands (docs/architecture.md, "Who may
import whom"), and the checker finds a violation of each when one is made."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.import_graph import RULES, read_graph

GRAPH = read_graph(REPO_ROOT)
MODULES = sorted([*REPO_ROOT.glob("flows/**/*.py"), *REPO_ROOT.glob("steps/**/*.py")])


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_code_keeps_the_import_rule(rule) -> None:
    assert rule(GRAPH) == [], rule.__doc__


def test_every_step_runs_as_a_module() -> None:
    for step in ("stage_data", "train", "optimize", "benchmark", "serve", "serve_check"):
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


def layout_tree(readme: str) -> dict[str, str]:
    """The README's Layout tree as {path: description}: two spaces of indent per level."""
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    tree, stack = {}, []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        name, _, description = line.strip().partition(" ")
        stack[depth:] = [name.rstrip("/")]
        tree["/".join(stack)] = description.strip()
    return tree


def test_the_readme_layout_shows_every_module() -> None:
    tree = layout_tree((REPO_ROOT / "README.md").read_text())
    missing = []
    for path in MODULES:
        if path.name in ("__init__.py", "__main__.py"):
            continue
        relative = path.relative_to(REPO_ROOT)
        folder = str(relative.parent)
        # A module is listed itself, or named in its folder's line (config/: sections, ...).
        if str(relative) not in tree and path.stem not in re.findall(r"\w+", tree.get(folder, "")):
            missing.append(str(relative))
    assert missing == [], "README Layout lacks these modules"


def test_every_module_stays_near_300_lines() -> None:
    """The style guide keeps modules to ~300 lines, split by responsibility."""
    long = {
        str(path.relative_to(REPO_ROOT)): lines
        for path in MODULES
        if (lines := len(path.read_text().splitlines())) > 330
    }
    assert long == {}
