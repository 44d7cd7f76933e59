"""docs/layout.md's and docs/architecture.md's Layout, the architecture's tree of the local
runner ("Local runs") and its import diagram ("Who may import whom") say what the code is."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.import_graph import read_graph
from tests.helpers.paths import REPO_ROOT

GRAPH = read_graph(REPO_ROOT)
MODULES = sorted([*REPO_ROOT.glob("flows/**/*.py"), *REPO_ROOT.glob("steps/**/*.py")])
LOCAL = REPO_ROOT / "flows" / "local"


def layout_tree(text: str, heading: str = "## Layout") -> dict[str, str]:
    """The first tree under ``heading`` (docs/layout.md's Layout, docs/architecture.md's, its
    flows/local under "Local runs") as {path: description}: two spaces of indent per level;
    a line indented deeper than one level below the entry before it continues that entry's
    description."""
    block = text.split(heading, 1)[1].split("```", 2)[1]
    tree: dict[str, str] = {}
    stack: list[str] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        if stack and depth > len(stack):
            key = "/".join(stack)
            tree[key] = f"{tree[key]} {line.strip()}"
            continue
        name, _, description = line.strip().partition(" ")
        stack[depth:] = [name.rstrip("/")]
        tree["/".join(stack)] = description.strip()
    return tree


def test_the_layout_page_shows_every_module() -> None:
    tree = layout_tree((REPO_ROOT / "docs" / "layout.md").read_text())
    missing = []
    for path in MODULES:
        if path.name in ("__init__.py", "__main__.py"):
            continue
        relative = path.relative_to(REPO_ROOT)
        folder = str(relative.parent)
        # A module is listed itself, or named in its folder's line (config/: sections, ...).
        if str(relative) not in tree and path.stem not in re.findall(r"\w+", tree.get(folder, "")):
            missing.append(str(relative))
    assert missing == [], "docs/layout.md's Layout lacks these modules"


# "One step, one folder": docs/architecture.md lists a step's package, docs/layout.md its modules.
STEP_FOLDERS = {
    f"steps/{step}"
    for step in ("stage_data", "train", "optimize", "benchmark", "serve", "serve_check")
}


def architecture_misses(tree: dict[str, str], relative: Path) -> bool:
    """Whether docs/architecture.md's Layout leaves a module out: listed itself, inside a
    step's listed folder, or named (it or the package holding it) in the line of the
    nearest listed folder above it (common/: config, storage, dataset, ...)."""
    if str(relative) in tree:
        return False
    for folder in relative.parents:
        if str(folder) in tree:
            if str(folder) in STEP_FOLDERS:
                return False
            named = Path(relative.relative_to(folder).parts[0]).stem
            return named not in re.findall(r"\w+", tree[str(folder)])
    return True


def test_the_architecture_layout_shows_every_module() -> None:
    """flows/local/ aside (its modules are docs/layout.md's to list)."""
    tree = layout_tree((REPO_ROOT / "docs" / "architecture.md").read_text())
    missing = [
        str(relative)
        for path in MODULES
        if path.name not in ("__init__.py", "__main__.py")
        and (relative := path.relative_to(REPO_ROOT)).parts[:2] != ("flows", "local")
        and architecture_misses(tree, relative)
    ]
    assert missing == [], "docs/architecture.md's Layout lacks these modules"
    listed = [path for path in tree if path.endswith(".py") and path.startswith(("flows", "steps"))]
    assert [path for path in listed if not (REPO_ROOT / path).is_file()] == []


def diagram_lines(text: str) -> dict[str, set[str]]:
    """docs/architecture.md's import diagram: each ``flows/<module>.py --> a, b/`` or
    ``flows/<package>/ --> a, b/`` line as {module or package: the flows modules and
    packages it names} (``steps/...`` and a parenthesis's words aside)."""
    block = text.split("## Who may import whom", 1)[1].split("```", 2)[1]
    lines = {}
    for line in block.splitlines():
        match = re.fullmatch(r"flows/(\w+)(?:\.py|/)\s+-->\s+(.*)", line.strip())
        if match:
            names = [n.strip().rstrip("/") for n in match.group(2).split("(")[0].split(",")]
            lines[f"flows.{match.group(1)}"] = {
                f"flows.{n}" for n in names if n and not n.startswith("steps")
            }
    return lines


def flows_unit(name: str) -> str:
    """The diagram's unit of a flows module: ``flows.<module>`` at the top, else its
    package under ``flows`` (``flows.cli.main`` -> ``flows.cli``)."""
    return ".".join(name.split(".")[:2])


def flows_imports(unit: str) -> set[str]:
    """What a flows module or package imports of flows (type-only imports too), each
    package counted as one (flows.manifests)."""
    found = set()
    for name, module in GRAPH.items():
        if name.startswith("flows.") and flows_unit(name) == unit:
            for target in module.imports | module.type_imports:
                if target.startswith("flows."):
                    found.add(flows_unit(target))
    return found - {unit}


def test_the_architecture_import_diagram_is_the_code() -> None:
    """Each of flows/'s modules at its top and each of its packages has its line, naming
    what it imports of flows; of steps/, flows/ reads only the config and the version."""
    lines = diagram_lines((REPO_ROOT / "docs" / "architecture.md").read_text())
    units = {flows_unit(name) for name in GRAPH if name.startswith("flows.")}
    assert lines.keys() == units, "a flows module without its line, or a line without its module"
    assert {u: flows_imports(u) for u in sorted(units)} == {u: lines[u] for u in sorted(units)}
    steps = {
        (name.split(".")[1] if name.startswith("flows.") else name, target)
        for name, module in GRAPH.items()
        if name.startswith("flows.")
        and not (name == "flows.local" or name.startswith("flows.local."))
        for target in (".".join(t.split(".")[:3]) for t in module.imports)
        if target.startswith("steps")
    }
    assert {target for _, target in steps} <= {"steps.common.config", "steps.common.version"}
    # the git revision a run records: the command line's --render/--submit and its local run
    assert {name for name, target in steps if target == "steps.common.version"} <= {"cli"}


def test_the_architecture_lists_every_local_runner_module() -> None:
    """docs/architecture.md's tree of flows/local ("Local runs") is the code's: every
    module listed, and nothing listed that is gone."""
    tree = layout_tree((REPO_ROOT / "docs" / "architecture.md").read_text(), "## Local runs")
    listed = {path for path in tree if path.endswith(".py")}
    present = {
        str(path.relative_to(REPO_ROOT))
        for path in LOCAL.rglob("*.py")
        if path.name != "__init__.py"
    }
    assert listed == present
