"""What the command line renders, submits or runs here: the pipeline's builders, as a
Protocol. flows/cifar.py's ``__main__`` block hands its own module in, so nothing under
``flows.cli`` (or ``flows.argo``) imports ``flows.cifar``, which ``python flows/cifar.py``
would then run a second time as another module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hera.workflows import CronWorkflow, Workflow, WorkflowTemplate

    from steps.common.config import PipelineConfig


class Pipeline(Protocol):
    """What the command line renders, submits or runs here: flows/cifar.py's builders."""

    def build_template(
        self, cfg: PipelineConfig, *, git_revision: str | None = None, source_keys: bool = False
    ) -> WorkflowTemplate: ...

    def build_submission(
        self,
        cfg: PipelineConfig,
        values: dict[str, str] | None = None,
        *,
        git_revision: str | None = None,
    ) -> Workflow: ...

    def build_cron_workflow(
        self,
        cfg: PipelineConfig,
        values: dict[str, str] | None = None,
        *,
        git_revision: str | None = None,
    ) -> CronWorkflow: ...

    def render(self, *documents: Workflow | WorkflowTemplate | CronWorkflow) -> str: ...
