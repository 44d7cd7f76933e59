"""The local runner's errors, one per way a workflow cannot go on here: refused (or a value
it cannot give), an expression that cannot be evaluated, a loop that cannot be expanded.
Argo marks a node whose expression or loop fails an Error; a refusal stops the run before
anything starts, or fails the node."""

from __future__ import annotations


class UnsupportedFeature(ValueError):
    """The workflow uses something the local runner does not implement."""


class ExpressionError(ValueError):
    """An expression that does not parse, names what is not there, or fails to evaluate."""


class LoopError(ValueError):
    """A loop that cannot be expanded (Argo marks its node Error)."""
