"""Builders that fail as native code fails, for ``optimize.extra_variants`` (issue 42): each
is named in a test's config as ``tests.helpers.faulty_builders:<function>`` and called in the
optimize step's build process as ``function(spec, ctx, path)``, as the built-in builders
are. Nothing in the project imports this module: a test's config names it, and the build
process imports it (the tests' folder is on that process's path, as on the test's). The
failing ones import nothing heavy, so ``job`` runs them in a bare ``Worker`` too."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any


def segfault(spec, ctx, path: Path) -> dict[str, Any]:
    """A real SIGSEGV: native code reading address 0, as a crashing compiler would."""
    ctypes.string_at(0)
    raise AssertionError("unreachable: reading address 0 did not crash")


def abort(spec, ctx, path: Path) -> dict[str, Any]:
    """A real SIGABRT: C's abort(), as a failed assertion in a runtime calls it."""
    ctypes.CDLL(None).abort()
    raise AssertionError("unreachable: abort() returned")


def hang(spec, ctx, path: Path) -> dict[str, Any]:
    """Never returns: a compiler stuck in a loop (the step stops it at its limit)."""
    while True:
        time.sleep(0.05)


def raises(spec, ctx, path: Path) -> dict[str, Any]:
    """A Python exception, as an exporter raises on an unsupported operator."""
    raise NotImplementedError("operator aten::faulty not supported by this exporter")


def exits(spec, ctx, path: Path) -> dict[str, Any]:
    """A library that ends the process itself, without a signal or a word."""
    os._exit(3)


def answers(spec, ctx, path: Path) -> dict[str, Any]:
    """Returns, saying which process it ran in."""
    return {"pid": os.getpid()}


def perturbed_torchscript(spec, ctx, path: Path) -> dict[str, Any]:
    """TorchScript of the model with its weights perturbed: a file that builds and reloads
    but fails the parity gate."""
    import copy
    import dataclasses

    import torch

    from steps.optimize import builders

    model = copy.deepcopy(ctx.model)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.5)
    replaced = dataclasses.replace(ctx, model=model, _exported={})
    return builders.build_torchscript(spec, replaced, path)


def job(state: Any, name: str) -> dict[str, Any]:
    """A ``steps.common.isolation.Worker`` job: the builder ``name`` of this module."""
    return globals()[name](None, None, Path("."))


def set_up(name: str) -> dict[str, Any]:
    """A ``Worker``'s set-up: the builder ``name`` of this module, its answer the state."""
    return globals()[name](None, None, Path("."))


def extra(name: str, builder: str, kind: str = "torchscript") -> str:
    """The ``--set`` value of one extra variant running ``builder`` of this module."""
    target = f"tests.helpers.faulty_builders:{builder}"
    return f'{{"name": "{name}", "kind": "{kind}", "builder": "{target}"}}'
