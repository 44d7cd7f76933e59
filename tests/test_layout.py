"""The design's import rules hold on the code as it stands (docs/architecture.md, "Who may
import whom"), and the checker finds a violation of each when one is made; flows/ builds
its DAG in one place, names a class once and keeps its errors in one module; modules stay
small. What the documents say of the layout: tests/test_layout_docs.py; the local runner's
shape: tests/test_layout_local_runner.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.import_graph import read_graph
from tests.helpers.import_rules import RULES
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


def step_clis_with_logic(root: Path) -> list[str]:
    """Issue 40: a step's ``step.py`` is its command line (parse, call, print): no class of
    its own, no function but ``build_parser``, ``run``, ``main`` and a few small readers of
    its arguments, and short. The work lives in modules named for it."""
    found = []
    for path in sorted(root.glob("steps/*/step.py")):
        relative = path.relative_to(root)
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found.append(f"{relative}: class {node.name}")
            elif isinstance(node, ast.FunctionDef) and node.name not in CLI_FUNCTIONS:
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 30:
                    found.append(f"{relative}: {node.name} ({length} lines)")
        if (lines := len(path.read_text().splitlines())) > 150:
            found.append(f"{relative}: {lines} lines")
    return found


CLI_FUNCTIONS = ("build_parser", "run", "main")


def test_each_steps_command_line_is_the_command_line_alone(tmp_path: Path) -> None:
    assert step_clis_with_logic(REPO_ROOT) == []
    # broken: the server's work back in the serve step's command line
    (tmp_path / "steps" / "serve").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(40))
    (tmp_path / "steps" / "serve" / "step.py").write_text(
        f"class ServeResult:\n    pass\n\n\ndef serve_model(uri):\n{body}\n"
    )
    assert step_clis_with_logic(tmp_path) == [
        "steps/serve/step.py: class ServeResult",
        "steps/serve/step.py: serve_model (41 lines)",
    ]
