"""The design's import rules hold on the code as it stands (docs/architecture.md, "Who may
import whom"), and the checker finds a violation of each when one is made; docs/layout.md's
and docs/architecture.md's Layout and the architecture's import diagram say what the code is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers.import_graph import RULES, read_graph
from tests.helpers.paths import REPO_ROOT

GRAPH = read_graph(REPO_ROOT)
MODULES = sorted([*REPO_ROOT.glob("flows/**/*.py"), *REPO_ROOT.glob("steps/**/*.py")])


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_code_keeps_the_import_rule(rule) -> None:
    assert rule(GRAPH) == [], rule.__doc__


def test_every_import_rule_has_a_broken_example() -> None:
    assert {case.split(" (")[0] for case in BROKEN} == set(RULES_BY_NAME)


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
        {"steps/common/pipeline_run.py": "import flows.cli\n"},
        "steps.common.pipeline_run imports flows.cli",
    ),
    "local_runner_imports_no_step_code": (
        {"flows/local/runner.py": "from steps.common.config import load_config\n"},
        "flows.local.runner imports steps.common.config",
    ),
    "nodes_and_pods_one_way": (
        {"flows/local/pods/pod.py": "from flows.local.nodes.node import run_node\n"},
        "flows.local.pods.pod imports flows.local.nodes.node",
    ),
    "nodes_and_pods_one_way (state)": (
        {"flows/local/state.py": "from flows.local.pods.processes import TaskHandler\n"},
        "flows.local.state imports flows.local.pods.processes",
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
    # a script's __main__ block that imports a module importing the script: ``python
    # flows/cifar.py`` would run cifar.py twice, as __main__ and as flows.cifar
    "import_cycles (__main__ block)": (
        {
            "flows/cifar.py": "def build():\n    pass\n\n\n"
            'if __name__ == "__main__":\n    from flows.cli import main\n',
            "flows/cli/main.py": "from flows.cifar import build\n",
        },
        "flows.cifar <-> flows.cli",
    ),
    # a circle through a type checker's import: a reader follows it all the same
    "import_cycles (type-only)": (
        {
            "flows/cli/main.py": "from typing import TYPE_CHECKING\n\n"
            "if TYPE_CHECKING:\n    from flows.cli.here import Here\n",
            "flows/cli/here.py": "from flows.cli.main import main\n",
        },
        "flows.cli.here <-> flows.cli.main",
    ),
    "no_twin_module_names": (
        {"flows/cli/run_here.py": "", "flows/local/run.py": ""},
        "flows.cli.run_here and flows.local.run: twin names",
    ),
    "no_twin_module_names (a step's command)": (
        {"flows/pipeline/tracking_step.py": "", "steps/tracking.py": ""},
        "flows.pipeline.tracking_step and steps.tracking: twin names",
    ),
    "nothing_ships_or_measures_with_tests": (
        {
            "benchmarks/serving.py": "from tests.helpers.servers import free_port\n",
            "flows/cli/main.py": "from tests.helpers.paths import REPO_ROOT\n",
        },
        "benchmarks.serving imports tests.helpers.servers",
    ),
    "nothing_ships_or_measures_with_tests (vendor.py)": (
        {"configs/cluster/vendor.py": "from tests.helpers.cluster_build import vendor\n"},
        "configs.cluster.vendor imports tests.helpers.cluster_build",
    ),
    "tests_import_helpers_never_a_test_module": (
        {"tests/test_cluster_submitter.py": "from tests.test_flow_submit import FakeArgo\n"},
        "tests.test_cluster_submitter imports tests.test_flow_submit",
    ),
    "tests_import_helpers_never_a_test_module (by its package)": (
        {
            "tests/test_conformance_jobs.py": "from tests import test_inferenceservice as ti\n",
            "tests/test_inferenceservice.py": "",
        },
        "tests.test_conformance_jobs imports tests.test_inferenceservice",
    ),
    "tests_import_helpers_never_a_test_module (conftest)": (
        {"tests/test_storage.py": "from tests.conftest import REPO_ROOT\n"},
        "tests.test_storage imports tests.conftest",
    ),
    "benchmarks_import_the_installed_project": (
        {"benchmarks/serving.py": "import sys\n\nsys.path.insert(0, '..')\nimport steps\n"},
        "benchmarks.serving:3 changes sys.path",
    ),
    "vendor_script_needs_no_install": (
        {"configs/cluster/vendor.py": "import yaml\n\nfrom vendor_pins import PINS\n"},
        "configs.cluster.vendor imports yaml",
    ),
    # a reader back on string keys: it no longer imports its contract
    "documents_read_through_their_contract": (
        {"steps/serve_check/rollback.py": "def read(doc):\n    return doc['version']\n"},
        "steps.serve_check.rollback reads its document without importing "
        "steps.common.contracts.promotion",
    ),
    # a module opening a document by hand names its file
    "documents_read_through_their_contract (a file's name)": (
        {
            "steps/predict.py": "import json\n\ndef read(store):\n"
            "    return json.loads(store.read_bytes('benchmark.json'))\n"
        },
        "steps.predict names benchmark.json outside its contract",
    ),
    "gpu_benchmark_imports_what_a_bare_gpu_machine_has": (
        {
            "benchmarks/gpu.py": "import torch\nfrom steps.train.fit import fit\n",
            "steps/train/fit.py": "def fit():\n    import mlflow\n",
        },
        "benchmarks.gpu -> steps.train.fit imports mlflow",
    ),
    "gpu_benchmark_imports_what_a_bare_gpu_machine_has (the AOTInductor diagnosis)": (
        {
            "benchmarks/aoti_diagnose.py": "from benchmarks.aoti_reproduction import script\n",
            "benchmarks/aoti_reproduction.py": "def script():\n    import pydantic\n",
        },
        "benchmarks.aoti_diagnose -> benchmarks.aoti_reproduction imports pydantic",
    ),
}


RULES_BY_NAME = {rule.__name__: rule for rule in RULES}


@pytest.mark.parametrize("case", BROKEN)
def test_the_checker_finds_a_broken_rule(case: str, tmp_path: Path) -> None:
    """Each entry of BROKEN (a rule's name, and what breaks it) is caught by its rule."""
    rule = RULES_BY_NAME[case.split(" (")[0]]
    files, words = BROKEN[case]
    for package in ("steps", "flows", "steps/common", "steps/stage_data", "steps/train"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = rule(read_graph(tmp_path))
    assert any(words in line for line in found), found


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


def dag_builders(root: Path) -> list[str]:
    """The flows modules that import Hera's DAG, Task or Steps: where DAGs are built."""
    found = []
    for path in sorted(root.glob("flows/**/*.py")):
        tree = ast.parse(path.read_text())
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hera")
            for alias in node.names
        }
        if imported & {"DAG", "Task", "Steps"}:
            found.append(str(path.relative_to(root)))
    return found


def twice_defined_classes(root: Path) -> list[str]:
    """Class names that flows/ defines in more than one place."""
    seen: dict[str, int] = {}
    for path in root.glob("flows/**/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                seen[node.name] = seen.get(node.name, 0) + 1
    return sorted(name for name, count in seen.items() if count > 1)


def test_the_whole_dag_is_built_in_the_pipeline_definition() -> None:
    """Issue 32: the pipeline's DAG and the exit handler's, edges and rollbacks included,
    are built in flows/cifar.py, as Hera's examples build theirs; every other flows module
    makes templates only (no DAG or Task built inside Hera's implicit context elsewhere)."""
    assert dag_builders(REPO_ROOT) == ["flows/cifar.py"]


def test_a_class_name_means_one_thing_in_flows() -> None:
    """Issue 32: two different NamedTuples were both called ServingTemplates."""
    assert twice_defined_classes(REPO_ROOT) == []


def errors_outside_their_module(root: Path) -> list[str]:
    """Exception classes that flows/ defines outside flows/errors.py: the errors of the
    command line, the pipeline's definition and the Argo client live in one module (issue
    40); the local runner (flows/local/) keeps its own."""
    found = []
    for path in sorted(root.glob("flows/**/*.py")):
        relative = path.relative_to(root)
        if relative == Path("flows/errors.py") or relative.parts[:2] == ("flows", "local"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            bases = {ast.unparse(b) for b in getattr(node, "bases", [])}
            if isinstance(node, ast.ClassDef) and any(
                b.endswith(("Error", "Exception")) for b in bases
            ):
                found.append(f"{relative}: {node.name}")
    return found


def test_the_flows_errors_live_in_one_module(tmp_path: Path) -> None:
    assert errors_outside_their_module(REPO_ROOT) == []
    assert {"FlowError", "UsageError", "SubmitError"} <= {
        node.name
        for node in ast.parse((REPO_ROOT / "flows" / "errors.py").read_text()).body
        if isinstance(node, ast.ClassDef)
    }
    # broken: SubmitError back beside the Argo client
    (tmp_path / "flows" / "argo").mkdir(parents=True)
    (tmp_path / "flows" / "argo" / "connection.py").write_text(
        "class SubmitError(RuntimeError):\n    pass\n"
    )
    assert errors_outside_their_module(tmp_path) == ["flows/argo/connection.py: SubmitError"]


def test_the_scripts_stay_under_400_lines() -> None:
    """configs/cluster/vendor.py and the benchmarks keep the style guide's limit too."""
    scripts = [*REPO_ROOT.glob("configs/cluster/vendor*.py"), *REPO_ROOT.glob("benchmarks/*.py")]
    long = {
        str(path.relative_to(REPO_ROOT)): lines
        for path in scripts
        if (lines := len(path.read_text().splitlines())) > 400
    }
    assert long == {}


def test_every_module_stays_near_300_lines() -> None:
    """The style guide keeps modules to ~300 lines, split by responsibility."""
    long = {
        str(path.relative_to(REPO_ROOT)): lines
        for path in MODULES
        if (lines := len(path.read_text().splitlines())) > 330
    }
    assert long == {}


LOCAL = REPO_ROOT / "flows" / "local"


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


def declared_stubs(source: str, module: str) -> list[str]:
    """Attributes a class declares with a type and no value, outside a dataclass: a
    mixin's promise that another class in its hierarchy holds them (``_run_task:
    Callable``), a call the import graph cannot show."""
    stubs = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        decorators = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
        if decorators & {"dataclass", "dataclasses.dataclass"}:
            continue
        bases = {ast.unparse(b) for b in node.bases}
        if bases & {"Protocol", "typing.Protocol", "NamedTuple", "TypedDict"}:
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and item.value is None:
                stubs.append(f"{module}.{node.name}.{ast.unparse(item.target)}")
    return stubs


def test_no_local_runner_class_declares_what_another_holds() -> None:
    """The local runner passes its run state to plain functions (flows/local/state.py),
    no mixins calling each other through declared stubs."""
    stubs = [
        stub
        for path in sorted(LOCAL.rglob("*.py"))
        for stub in declared_stubs(path.read_text(), str(path.relative_to(REPO_ROOT)))
    ]
    assert stubs == []


def test_the_stub_check_finds_a_mixin() -> None:
    mixin = "class Steps:\n    tasks: dict\n    _run_task: Callable[..., None]\n"
    assert declared_stubs(mixin, "m") == ["m.Steps.tasks", "m.Steps._run_task"]
    held = "@dataclass\nclass State:\n    tasks: dict\n"
    assert declared_stubs(held, "m") == []


def run_node_as_a_value(source: str, module: str) -> list[str]:
    """Where ``run_node`` is handed on instead of called: a parameter of that name, or the
    name used other than as the function of a call (passed, stored, returned). Its
    callers are then found by reading for ``run_node(``, as Argo's for ``executeTemplate(``."""
    tree = ast.parse(source)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == "run_node":
            found.append(f"{module}:{node.lineno}: a parameter named run_node")
        named = (isinstance(node, ast.Name) and node.id == "run_node") or (
            isinstance(node, ast.Attribute) and node.attr == "run_node"
        )
        if named and isinstance(node.ctx, ast.Load) and id(node) not in called:
            found.append(f"{module}:{node.lineno}: run_node handed on as a value")
    return found


def test_run_node_is_called_by_name() -> None:
    """Who runs a node reads as it does in Argo's controller: the DAG's and steps' loop call
    ``run_node`` by name (executeTemplate), no function passed down to reach it."""
    found = [
        problem
        for path in sorted(LOCAL.rglob("*.py"))
        for problem in run_node_as_a_value(path.read_text(), str(path.relative_to(REPO_ROOT)))
    ]
    assert found == []
    assert "run_node(" in (LOCAL / "nodes" / "node.py").read_text()


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("def run_dag(state, run_node):\n    run_node(state)\n", "a parameter named run_node"),
        ("from x import run_node\nschedule(state, run_node)\n", "handed on as a value"),
        ("pool.submit(nodes.run_node, state)\n", "handed on as a value"),
        ("RUN = {'node': run_node}\n", "handed on as a value"),
    ],
    ids=["parameter", "argument", "attribute", "stored"],
)
def test_the_run_node_check_finds_it_handed_on(source: str, words: str) -> None:
    assert any(words in problem for problem in run_node_as_a_value(source, "m"))
    assert run_node_as_a_value("from x import run_node\nrun_node(state, task)\n", "m") == []


def test_the_local_runner_has_one_scheduling_loop() -> None:
    """Nodes start on threads in one place (flows/local/nodes/node.py's run_nodes)."""
    pools = [
        str(path.relative_to(REPO_ROOT))
        for path in sorted(LOCAL.rglob("*.py"))
        if "ThreadPoolExecutor(" in path.read_text()
    ]
    assert pools == ["flows/local/nodes/node.py"]
