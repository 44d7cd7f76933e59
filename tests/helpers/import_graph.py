"""The project's import graph, read from the source (nothing is imported): every module with
what it imports, what reaches what, and the circles (tests/helpers/import_rules.py holds
the design's rules over it, docs/architecture.md "Who may import whom")."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("steps", "flows", "benchmarks", "tests")
# Scripts outside the packages, run as ``python <path>`` (their folder first on sys.path):
# configs/cluster/vendor.py, which fetches the pinned upstream files before anything is
# installed, and the modules it imports beside it.
SCRIPTS = ("configs/cluster/vendor*.py",)
STEP_PACKAGES = ("stage_data", "train", "optimize", "benchmark")
STEP_MODULES = ("predict", "tracking", "config")  # single-module CLIs under steps/


@dataclass
class Module:
    name: str
    path: Path
    # every module it names: lazy ones and a ``__main__`` block's too (``python x.py``
    # runs that block, and its imports run as the file's own)
    imports: set[str] = field(default_factory=set)
    # what it names for type checkers only (``if TYPE_CHECKING:``): never run, but an
    # edge all the same for the circles a reader follows
    type_imports: set[str] = field(default_factory=set)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _never_run(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside ``if TYPE_CHECKING:``: read by type checkers, never run. (A ``__main__``
    block runs: ``python flows/cifar.py`` imports what its block names.)"""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            return True
    return False


def read_graph(root: Path) -> dict[str, Module]:
    """Every module of ``steps/``, ``flows/`` and ``benchmarks/`` under ``root`` with what
    it imports."""
    modules = {}
    paths = [p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))]
    paths += [p for pattern in SCRIPTS for p in sorted(root.glob(pattern))]
    for path in paths:
        name = module_name(root, path)
        modules[name] = Module(name, path)
    for module in modules.values():
        tree = ast.parse(module.path.read_text(), str(module.path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = set(_targets(node, modules, module.name))
                if _never_run(node, parents):
                    module.type_imports |= targets
                else:
                    module.imports |= targets
    return modules


def _targets(
    node: ast.Import | ast.ImportFrom, modules: dict[str, Module], importer: str
) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (_sibling(alias.name, modules, importer) for alias in node.names)
        return
    base = _sibling(node.module or "", modules, importer)
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        yield candidate if candidate in modules else base


def _sibling(name: str, modules: dict[str, Module], importer: str) -> str:
    """A script's plain import of a module beside it (``from serving_load import ...`` in
    benchmarks/serving.py: ``python benchmarks/serving.py`` puts its folder first on
    sys.path) as that module's full name; any other name as it is."""
    folder = importer.rsplit(".", 1)[0] if "." in importer else ""
    beside = f"{folder}.{name}" if folder else name
    return beside if name not in modules and beside in modules else name


def top(name: str) -> str:
    return name.split(".")[0]


def step_of(name: str) -> str | None:
    """The step a module belongs to (``steps.train.fit`` -> ``train``); None for the rest."""
    parts = name.split(".")
    if parts[0] != "steps" or len(parts) < 2:
        return None
    if parts[1] in STEP_PACKAGES or parts[1] in STEP_MODULES:
        return parts[1]
    return None


def reachable(graph: dict[str, Module], start: str) -> dict[str, list[str]]:
    """Project modules reachable from ``start`` (a package's ``__init__`` included), each
    with one import path to it."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        current = queue.pop(0)
        for target in sorted(graph[current].imports):
            for name in _with_parents(target, graph):
                if name not in paths:
                    paths[name] = [*paths[current], name]
                    queue.append(name)
    return paths


def _with_parents(target: str, graph: dict[str, Module]) -> list[str]:
    """Importing ``a.b.c`` runs ``a/__init__``, ``a.b/__init__`` and ``a.b.c``."""
    parts = target.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in graph]


def import_cycles(graph: dict[str, Module]) -> list[str]:
    """Every strongly connected group of modules that import each other (Tarjan), a
    ``TYPE_CHECKING`` import counted as any other: a circle a reader follows is one."""
    return _cycles(graph, typed=True)


def _cycles(graph: dict[str, Module], typed: bool) -> list[str]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[str] = []

    def edges(name: str) -> list[str]:
        # A module's own packages were imported before it ran: no edge back to them.
        ancestors = set(_with_parents(name, graph)) - {name}
        named = graph[name].imports | (graph[name].type_imports if typed else set())
        targets = {t for target in named for t in _with_parents(target, graph)}
        return sorted(targets - ancestors)

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in edges(name):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                cycles.append(" <-> ".join(sorted(group)))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return cycles
