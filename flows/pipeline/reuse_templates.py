"""A memoized step in the DAG, and what makes its reuse safe: a memo hit is checked, and run
again when what it points at is gone.

Argo trusts its cache: a hit hands on the outputs an earlier workflow saved, even when
the objects they name were deleted since (v4.0.5 workflow/controller/operator.go
``executeTemplate``: a hit is a Succeeded node with the entry's outputs, no pod). So each
memoized step is three kinds of task (``Reuse`` names them; flows/cifar.py makes them):

    <step>            the memoized template (train: one task per training template,
                      picked by ``when``); a hit Succeeds at once
    <step>-reused     only after a hit (its ``workflow`` output names another workflow):
                      ``python -m steps.reuse`` checks that the objects still exist (and,
                      for the benchmark, that the registry is as its decision left it),
                      records the reuse in this run's MLflow run, and says ``gone``
    <step>-again      only when gone: the same template with ``memo-max-age: 0s``, so
                      the entry is too old to take, the step runs and its success
                      overwrites the entry (workflow/controller/cache/configmap_cache.go)

What reads the step's outputs takes them from ``<step>-again`` when it ran, else from
the task that ran or hit (``Reuse.output``): the earlier run's URIs on a hit, never
URIs recomputed from this workflow's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hera.workflows import Container, Parameter
from hera.workflows import models as m

from flows.manifests.shared_pod import OUTPUTS_DIR
from flows.pipeline.parameters import input_ref
from flows.pipeline.step_template import container_step
from steps.common.config import PipelineConfig

CHECK = "reuse-check"
WORKFLOW_OUTPUT = "workflow"  # the workflow that ran the step (a hit: an earlier one)
RUN_OUTPUT = "mlflow-run-id"  # the MLflow run it logged into


def ran_here(*, run_id: bool = False) -> list[Parameter]:
    """Outputs that say where a step ran: ``workflow``, and with ``run_id`` the MLflow run
    it logged into (``given``)."""
    made = [given(WORKFLOW_OUTPUT, "{{workflow.name}}")]
    return [*made, given(RUN_OUTPUT, input_ref("run-id"))] if run_id else made


def given(name: str, value: str) -> Parameter:
    """An output that is what the step was given (``value``, a tag Argo fills in): the step
    writes no file for it, and Argo's executor takes ``valueFrom.default`` for a file that
    is not there (v4.0.5 workflow/executor/executor.go ``SaveParameters``), after
    substituting the whole template, outputs included, before the pod starts
    (workflow/common/util.go ``SubstituteParams``). So the memo entry records the run that
    did the work and where it wrote, and a hit hands that on."""
    source = m.ValueFrom(path=f"{OUTPUTS_DIR}/given-{name}", default=value)
    return Parameter(name=name, value_from=source)


def reuse_check_template(cfg: PipelineConfig, settings: Sequence[str]) -> Container:
    """``reuse-check``: ``python -m steps.reuse`` for a memo hit of ``step``, whose
    outputs (``reused``, JSON) it checks and records in the MLflow run ``run-id``."""
    return container_step(
        cfg,
        name=CHECK,
        image="train",  # MLflow and S3, as create-run's
        tracking=True,
        module="steps.reuse",
        args=[
            "--step",
            input_ref("step"),
            "--reused",
            input_ref("reused"),
            "--mlflow-run-id",
            input_ref("run-id"),
            "--outputs-dir",
            OUTPUTS_DIR,
        ],
        settings=settings,
        inputs=["step", "reused", "run-id"],
        # default: what a skipped check gives (Argo v4.0.7+ and the local runner)
        outputs=[
            Parameter(
                name="gone", value_from=m.ValueFrom(path=f"{OUTPUTS_DIR}/gone", default="false")
            )
        ],
    )


def _task_ref(task: str) -> str:
    return f"tasks['{task}']"


def first_of(tasks: Sequence[str], output: str) -> str:
    """An expression: ``output`` of the first of ``tasks`` that Succeeded (a hit does), else
    of the last one."""
    expression = f"{_task_ref(tasks[-1])}.outputs.parameters['{output}']"
    for task in reversed(tasks[:-1]):
        value = f"{_task_ref(task)}.outputs.parameters['{output}']"
        expression = f"({_task_ref(task)}.status == 'Succeeded' ? {value} : {expression})"
    return expression


@dataclass(frozen=True)
class Reuse:
    """The names and expressions of one memoized step's tasks (flows/cifar.py makes them):
    ``runs``, its task per template (train: one per training template, each picked by its
    ``when``), then ``check`` after a hit and a run again (``again``) of each template."""

    step: str
    runs: tuple[str, ...]

    @property
    def check(self) -> str:
        return f"{self.step}-reused"

    @staticmethod
    def again(run: str) -> str:
        return f"{run}-again"

    @property
    def check_when(self) -> str:
        """After a hit: the ``workflow`` that ran the step is another one."""
        return f"{{{{={first_of(self.runs, WORKFLOW_OUTPUT)} != workflow.name}}}}"

    def check_arguments(self, reused: Sequence[str], run_id: str) -> dict[str, str]:
        """The check's inputs: the step, the hit's outputs ``reused`` (and ``workflow``) as
        JSON, this run's MLflow run."""
        given = ", ".join(f"'{n}': {first_of(self.runs, n)}" for n in [WORKFLOW_OUTPUT, *reused])
        return {"step": self.step, "reused": f"{{{{=toJson({{{given}}})}}}}", "run-id": run_id}

    def again_when(self, when: str | None) -> str:
        """A template's run again: the check found the hit gone (and its own ``when``)."""
        gone = f"'{{{{tasks.{self.check}.outputs.parameters.gone}}}}' == 'true'"
        return f"{gone} && {when}" if when else gone

    @property
    def ends(self) -> list[str]:
        """The tasks whose outputs a reader takes: the runs again first."""
        return [*(self.again(run) for run in self.runs), *self.runs]

    def output(self, name: str) -> str:
        """The step's output ``name``: the run again's when it ran, else the one that ran or
        hit (the earlier run's, handed on)."""
        return f"{{{{={first_of(self.ends, name)}}}}}"
