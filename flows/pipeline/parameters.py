"""The workflow's parameters: what a person changes per run, on our CLI (``-p name=value``,
as ``argo submit -p``) or when resubmitting from the Argo UI.

Each parameter stands for one config field. The WorkflowTemplate declares them with the
config's values as defaults, and the steps read ``{{workflow.parameters.<name>}}`` where
they would read the field, so a value given at submission does what it says. A local run
executes the same WorkflowTemplate with the values as its Workflow's arguments; each value
is checked first as the ``--set`` of its field (``as_overrides``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flows.errors import FlowError
from flows.manifests.shared_pod import STEP_SECTIONS, config_args, render_value
from steps.common.config import PipelineConfig


@dataclass(frozen=True)
class Param:
    name: str
    field: str  # section.field of the config
    description: str

    @property
    def ref(self) -> str:
        """The Argo variable; a name with a ``-`` needs the bracket form in expressions."""
        return f"{{{{workflow.parameters.{self.name}}}}}"

    @property
    def section(self) -> str:
        return self.field.split(".", 1)[0]


PARAMETERS = (
    Param("data-source", "data.source", "cifar10, synthetic[:N], an S3 URI or a tarball path"),
    Param("model", "train.model", "architecture: resnet9 or simplecnn"),
    Param("epochs", "train.epochs", "epochs to train"),
    Param("batch-size", "train.batch_size", "global batch size (split over ranks)"),
    Param("lr", "train.lr", "peak learning rate"),
    Param("target-accuracy", "train.target_accuracy", "stop at this test accuracy (null: never)"),
    Param("nodes", "cluster.nodes", "training pods (PyTorchJob Master + Workers, TrainJob nodes)"),
    Param("nproc-per-node", "train.nproc_per_node", "training processes per pod"),
    Param("gpus-per-node", "cluster.gpus_per_node", "nvidia.com/gpu per training pod"),
)
BY_NAME = {p.name: p for p in PARAMETERS}


def ref(name: str) -> str:
    return BY_NAME[name].ref


def input_ref(name: str) -> str:
    """A template's own input parameter, where its command line or manifest reads it."""
    return f"{{{{inputs.parameters.{name}}}}}"


def value_of(cfg: PipelineConfig, param: Param) -> str:
    """The config's value of a parameter as the string Argo substitutes; processes per
    node as the config resolves them (``auto``: one per GPU, else one)."""
    section, field = param.field.split(".", 1)
    value: Any = getattr(getattr(cfg, section), field)
    if param.name == "nproc-per-node":
        value = cfg.processes_per_node()
    return render_value(value)


def defaults(cfg: PipelineConfig) -> dict[str, str]:
    """Every parameter's value in this config: the WorkflowTemplate's defaults."""
    return {p.name: value_of(cfg, p) for p in PARAMETERS}


def parse(assignments: Iterable[str]) -> dict[str, str]:
    """``name=value`` strings (``-p``) to a dict; an unknown or malformed one is one line
    naming the known parameters."""
    values: dict[str, str] = {}
    known = ", ".join(BY_NAME)
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise FlowError(f"-p {item}: give name=value; parameters: {known}")
        if name not in BY_NAME:
            near = difflib.get_close_matches(name, BY_NAME, n=1, cutoff=0.6)
            guess = f"did you mean {near[0]}? " if near else ""
            raise FlowError(f"-p {name}: unknown parameter; {guess}parameters: {known}")
        values[name] = value
    return values


def as_overrides(values: Mapping[str, str]) -> list[str]:
    """The ``--set`` overrides that give the config these parameter values: how a local run
    applies ``-p``, and how a submission checks a value before Argo sees it."""
    return [f"{BY_NAME[name].field}={value}" for name, value in values.items()]


def in_user_terms(message: str, assignments: Iterable[str]) -> str:
    """A config error about a ``-p`` value as the user typed it: ``-p epochs=0``, not the
    ``--set train.epochs=0`` it was checked as."""
    for item in assignments:
        name, _, value = item.partition("=")
        if name in BY_NAME:
            message = message.replace(f"--set {BY_NAME[name].field}={value}:", f"-p {item}:")
    return message


def step_settings(cfg: PipelineConfig) -> list[str]:
    """The config as every step's ``--set`` arguments, the parameters' fields from
    ``{{workflow.parameters.x}}`` instead of the config. The config's own arguments are
    computed whole (a field checked against a parameter's field, such as
    cluster.elastic_min_nodes against cluster.nodes, stays valid) and the parameters'
    fields are then left to the parameters."""
    settings = config_args(cfg)
    params = [p for p in PARAMETERS if p.section in STEP_SECTIONS]
    fields = {p.field for p in params}
    pairs = zip(settings[::2], settings[1::2], strict=True)
    kept = [arg for pair in pairs if pair[1].split("=", 1)[0] not in fields for arg in pair]
    return kept + [arg for p in params for arg in ("--set", f"{p.field}={p.ref}")]
