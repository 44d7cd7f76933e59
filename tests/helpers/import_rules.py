"""The design's import rules over the graph tests/helpers/import_graph.py reads
(docs/architecture.md, "Who may import whom"): each a function of the graph returning its
problems, one line each; tests/test_layout.py holds the code to them and breaks each."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.helpers.import_graph import (
    STEP_MODULES,
    Module,
    import_cycles,
    reachable,
    step_of,
    top,
)


def step_imports_only_common_and_itself(graph: dict[str, Module]) -> list[str]:
    """A step imports only ``steps.common`` and its own folder: never another step,
    flows/ or Hera, so it runs alone inside its image."""
    problems = []
    for module in graph.values():
        mine = step_of(module.name)
        if mine is None:
            continue
        for target in sorted(module.imports):
            if top(target) in ("flows", "hera"):
                problems.append(f"{module.name} imports {target}")
            elif top(target) == "steps" and target != "steps":
                other = step_of(target)
                if other is not None and other != mine:
                    problems.append(f"{module.name} imports {target} (another step)")
    return problems


def common_imports_no_step_or_flow(graph: dict[str, Module]) -> list[str]:
    """``steps.common`` is shared by every step: it imports no step and no flow."""
    return [
        f"{module.name} imports {target}"
        for module in graph.values()
        if module.name.startswith("steps.common")
        for target in sorted(module.imports)
        if top(target) in ("flows", "hera") or step_of(target) is not None
    ]


def local_runner_imports_no_step_code(graph: dict[str, Module]) -> list[str]:
    """The local runner runs the templates' commands; it never imports what they run."""
    return [
        f"{module.name} imports {target}"
        for module in graph.values()
        if module.name == "flows.local" or module.name.startswith("flows.local.")
        for target in sorted(module.imports)
        if top(target) == "steps"
    ]


def staging_never_imports_torch(graph: dict[str, Module]) -> list[str]:
    """``steps.stage_data`` and everything it imports stay torch-free: the data image is small."""
    problems = []
    for start in (n for n in graph if n == "steps.stage_data" or n.startswith("steps.stage_data.")):
        for name, path in reachable(graph, start).items():
            heavy = sorted(t for t in graph[name].imports if top(t) == "torch")
            if heavy:
                problems.append(f"{start} reaches torch: {' -> '.join(path)} imports {heavy[0]}")
    return sorted(set(problems))


def nodes_and_pods_one_way(graph: dict[str, Module]) -> list[str]:
    """The local runner's pod path goes one way: ``flows.local.nodes`` imports
    ``flows.local.pods``, never the reverse; ``flows.local.state``, which both read,
    imports neither."""
    problems = []
    for module in graph.values():
        if module.name.startswith("flows.local.pods"):
            banned: tuple[str, ...] = ("flows.local.nodes",)
        elif module.name == "flows.local.state":
            banned = ("flows.local.nodes", "flows.local.pods")
        else:
            continue
        problems += [
            f"{module.name} imports {target}"
            for target in sorted(module.imports)
            if target.startswith(banned)
        ]
    return problems


def nothing_ships_or_measures_with_tests(graph: dict[str, Module]) -> list[str]:
    """What ships (``steps/``, ``flows/``), the benchmarks and configs/cluster/vendor.py
    import nothing from ``tests/``: the real servers a benchmark measures against start
    through the project (``flows.local.servers``), as the tests' fixtures start them."""
    return [
        f"{module.name} imports {target}"
        for module in graph.values()
        if top(module.name) != "tests"
        for target in sorted(module.imports | module.type_imports)
        if top(target) == "tests"
    ]


def tests_import_helpers_never_a_test_module(graph: dict[str, Module]) -> list[str]:
    """A module of ``tests/`` imports what tests share from ``tests.helpers`` by name: never
    a test module (``tests.test_*``), never ``tests.conftest`` (pytest's, fixtures only)."""
    return [
        f"{module.name} imports {target}"
        for module in graph.values()
        if top(module.name) == "tests"
        for target in sorted(module.imports | module.type_imports)
        if target == "tests.conftest"
        or (target.startswith("tests.") and target.split(".")[1].startswith("test_"))
    ]


# The scripts that run on a bare GPU machine, the project not installed (GPU_MACHINE_HAS):
# they find the checkout's steps/ and their siblings by a path set-up of their own.
SYS_PATH_ALLOWED = ("benchmarks.gpu", "benchmarks.aoti_diagnose")


def benchmarks_import_the_installed_project(graph: dict[str, Module]) -> list[str]:
    """A benchmark imports the project as installed (``pip install -e .``) and its siblings
    by their names, as ``python benchmarks/x.py`` finds them: it changes no ``sys.path``
    (``SYS_PATH_ALLOWED`` aside)."""
    problems = []
    for module in graph.values():
        if top(module.name) != "benchmarks" or module.name in SYS_PATH_ALLOWED:
            continue
        tree = ast.parse(module.path.read_text(), str(module.path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.path":
                problems.append(f"{module.name}:{node.lineno} changes sys.path")
                break
    return problems


def vendor_script_needs_no_install(graph: dict[str, Module]) -> list[str]:
    """configs/cluster/vendor.py and the modules beside it that it imports name only the
    standard library and each other: it runs before the project is installed."""
    problems = []
    for script in (name for name in graph if name.startswith("configs.cluster.vendor")):
        for target in sorted(graph[script].imports):
            if top(target) not in sys.stdlib_module_names and not target.startswith(
                "configs.cluster.vendor"
            ):
                problems.append(f"{script} imports {target}")
    return problems


# What benchmarks/gpu.py may reach: the GPU machines this project borrows hold PyTorch and
# its usual company but none of the project's other dependencies (the device's KINDS.md).
# torch_tensorrt is looked for and used where installed (its imports are guarded).
GPU_MACHINE_HAS = frozenset(
    {"torch", "torchvision", "numpy", "PIL", "torch_tensorrt", "steps", "benchmarks"}
)


GPU_SCRIPTS = ("benchmarks.gpu", "benchmarks.aoti_diagnose")  # run there, nothing installed


def gpu_benchmark_imports_what_a_bare_gpu_machine_has(graph: dict[str, Module]) -> list[str]:
    """``benchmarks.gpu``, ``benchmarks.aoti_diagnose`` and everything they import name only
    the standard library, PyTorch, torchvision, numpy and PIL (lazy imports too): no
    pydantic, MLflow or boto3."""
    problems = []
    for script in (s for s in GPU_SCRIPTS if s in graph):
        for name, path in reachable(graph, script).items():
            for target in sorted(graph[name].imports):
                first = top(target)
                if first not in GPU_MACHINE_HAS and first not in sys.stdlib_module_names:
                    problems.append(f"{' -> '.join(path)} imports {target}")
    return sorted(set(problems))


# The documents steps hand each other are read through their contracts (issue 40):
# steps/common/contracts/ (pydantic), and the served model's serving.json through
# steps/common/serving/serving_manifest.py, which classifier.py imports by its file's name
# (the model's code_paths). Each reader imports its contract, so none reads one by string
# keys again; and no other module of steps/ names a document's file: a reader that opens
# one by hand has to name it.
CONTRACTS = "steps.common.contracts"
CONTRACT_READERS = {
    "steps.common.optimized_variants": f"{CONTRACTS}.variants",  # benchmark, predict
    "steps.optimize.manifest": f"{CONTRACTS}.variants",  # a rerun reads the one it finds
    "steps.benchmark.registered_model": f"{CONTRACTS}.variants",
    "steps.benchmark.champion": f"{CONTRACTS}.variants",
    "steps.predict": f"{CONTRACTS}.benchmark",  # --report
    "steps.serve_check.expected": f"{CONTRACTS}.benchmark",
    "steps.serve_check.check": f"{CONTRACTS}.promotion",
    "steps.serve_check.rollback": f"{CONTRACTS}.promotion",
    "steps.serve_check.report": f"{CONTRACTS}.serve_check",
    "steps.common.serving.classifier": "steps.common.serving.serving_manifest",
}
DOCUMENT_FILES = ("variants.json", "benchmark.json", "serving.json")
DOCUMENT_OWNERS = (CONTRACTS, "steps.common.serving.serving_manifest")


def documents_read_through_their_contract(graph: dict[str, Module]) -> list[str]:
    """Each reader in ``CONTRACT_READERS`` imports its contract (or the contracts'
    package); no module of ``steps/`` but the contracts names a document's file in its
    code (docstrings and comments aside)."""
    problems = []
    for reader, contract in CONTRACT_READERS.items():
        if reader not in graph:
            problems.append(f"{reader} is gone: CONTRACT_READERS names it")
        elif not graph[reader].imports & {contract, CONTRACTS}:
            problems.append(f"{reader} reads its document without importing {contract}")
    for module in graph.values():
        if top(module.name) != "steps" or module.name.startswith(DOCUMENT_OWNERS):
            continue
        for text in sorted(_code_strings(module.path)):
            named = [f for f in DOCUMENT_FILES if text == f or text.endswith(f"/{f}")]
            if named:
                problems.append(f"{module.name} names {named[0]} outside its contract")
    return problems


def _code_strings(path: Path) -> set[str]:
    """The string constants of a module's code, its docstrings left out."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    }


# The command line's, the pipeline's and the Argo client's modules, and the local runner's,
# are different jobs: a module named like another job's (``run_here`` beside
# ``flows/local/run.py``, ``tracking_step`` beside ``steps/tracking.py``) sends a reader to
# the wrong file. ``flows/errors.py`` holds the command line's errors; the local runner's
# own are ``flows/local/errors.py`` (issue 40), the one pair of one name.
TWIN_NAMES_ALLOWED = frozenset({("flows.errors", "flows.local.errors")})


def _job(name: str) -> str:
    """The job a module of ``flows/`` does: its package under ``flows`` (``flows.local``,
    ``flows.cli``, ...), or ``flows`` for the modules at its top (cifar.py, errors.py);
    ``steps`` for steps/'s single-module commands."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "flows" and len(parts) > 2 else parts[0]


def no_twin_module_names(graph: dict[str, Module]) -> list[str]:
    """No module of ``flows/`` is named as a module of another job, or as one with a
    suffix (``run`` and ``run_here``): not another flows package's, not steps/'s
    single-module commands' (``steps.tracking``); ``TWIN_NAMES_ALLOWED`` aside."""
    named = sorted(
        name
        for name, module in graph.items()
        if module.path.name not in ("__init__.py", "__main__.py")
        and (top(name) == "flows" or (top(name) == "steps" and step_of(name) in STEP_MODULES))
    )
    problems = []
    for i, first in enumerate(named):
        for second in named[i + 1 :]:
            if _job(first) == _job(second) or (first, second) in TWIN_NAMES_ALLOWED:
                continue
            a, b = first.rsplit(".", 1)[1], second.rsplit(".", 1)[1]
            if a == b or a.startswith(f"{b}_") or b.startswith(f"{a}_"):
                problems.append(f"{first} and {second}: twin names")
    return problems


RULES = (
    step_imports_only_common_and_itself,
    common_imports_no_step_or_flow,
    local_runner_imports_no_step_code,
    nodes_and_pods_one_way,
    staging_never_imports_torch,
    import_cycles,
    nothing_ships_or_measures_with_tests,
    tests_import_helpers_never_a_test_module,
    benchmarks_import_the_installed_project,
    vendor_script_needs_no_install,
    gpu_benchmark_imports_what_a_bare_gpu_machine_has,
    documents_read_through_their_contract,
    no_twin_module_names,
)
