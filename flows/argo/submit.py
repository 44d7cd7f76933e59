"""Send the pipeline to an Argo server with Hera's WorkflowsService; follow it; schedule it.

Where the server is and how its answers are explained: ``flows.argo.connection``. A template or
CronWorkflow that exists is updated (re-read and retried once when another client changed
it in between); a followed workflow's MLflow run link is printed when its step publishes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests
from hera.exceptions import AlreadyExists, HeraException, NotFound
from hera.workflows import CronWorkflow, Workflow, WorkflowsService, WorkflowTemplate
from hera.workflows.models import (
    CreateCronWorkflowRequest,
    UpdateCronWorkflowRequest,
    WorkflowCreateRequest,
    WorkflowTemplateCreateRequest,
    WorkflowTemplateUpdateRequest,
)

from flows.argo.connection import ArgoTarget, call, explain, service
from flows.errors import SubmitError
from flows.manifests.names import argo_ui, mlflow_ui, workflow_url
from steps.common.config import PipelineConfig

DONE = ("Succeeded", "Failed", "Error")
RUN_URL_GLOBAL = "mlflow-run-url"
POLL_ERRORS_TOLERATED = 3


def _global_output(status: Any, name: str) -> str | None:
    outputs = getattr(status, "outputs", None)
    for parameter in getattr(outputs, "parameters", None) or []:
        if parameter.name == name and parameter.value:
            return str(parameter.value)
    return None


def follow(
    svc: WorkflowsService,
    cfg: PipelineConfig,
    target: ArgoTarget,
    name: str,
    out: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Poll the workflow until it is done; print each phase change and the MLflow run."""
    last, run_url, errors = None, None, 0
    while True:
        try:
            wf = svc.get_workflow(name, namespace=target.namespace)
            errors = 0
        except requests.ConnectionError as exc:  # a blip during a long run is not the end
            errors += 1
            if errors > POLL_ERRORS_TOLERATED:
                raise SubmitError(explain(exc, target, "workflow")) from exc
            sleep(cfg.cluster.poll_interval_s)
            continue
        except HeraException as exc:
            raise SubmitError(explain(exc, target, "workflow")) from exc
        status = wf.status
        phase = (status.phase if status else None) or "Pending"
        progress = (status.progress if status else None) or ""
        if (phase, progress) != last:
            out(f"{name}: {phase} {progress}".rstrip())
            last = (phase, progress)
        url = _global_output(status, RUN_URL_GLOBAL)
        if url and url != run_url:
            out(f"MLflow run: {url}")
            run_url = url
        if phase in DONE:
            if phase != "Succeeded" and status and status.message:
                out(f"{name}: {status.message}")
            return phase
        sleep(cfg.cluster.poll_interval_s)


def submit_workflow(
    workflow: Workflow,
    cfg: PipelineConfig,
    target: ArgoTarget,
    *,
    wait: bool = False,
    out: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Create the workflow; print its name and links; with ``wait``, follow it to the end."""
    svc = service(target)
    request = WorkflowCreateRequest(workflow=workflow.build())  # type: ignore[arg-type]
    created = call(
        lambda: svc.create_workflow(request, namespace=target.namespace), target, "workflow"
    )
    name = created.metadata.name
    out(f"Workflow {name} submitted to namespace {target.namespace}")
    out(f"Argo UI: {workflow_url(cfg, target.namespace, name)}")
    if mlflow_ui(cfg):
        out(f"MLflow: {mlflow_ui(cfg)} (experiment {cfg.tracking.experiment}, run {name})")
    if not wait:
        return 0
    phase = follow(svc, cfg, target, name, out, sleep)
    return 0 if phase == "Succeeded" else 1


def _upsert(
    get: Callable[[], Any],
    create: Callable[[], Any],
    update: Callable[[str], Any],
    target: ArgoTarget,
    what: str,
) -> str:
    """Create the object, or update it in place: the Argo API takes an update only with
    the stored object's resourceVersion, so read that first. Someone else's write between
    the read and ours is a 409; read again and try once more, then say so."""
    for attempt in (1, 2):
        try:
            current = get()
        except NotFound:
            current = None
        except (HeraException, requests.RequestException) as exc:
            raise SubmitError(explain(exc, target, what)) from exc
        try:
            if current is None:
                create()
                return "created"
            update(current.metadata.resource_version)
            return "updated"
        except AlreadyExists as exc:
            if attempt == 2:
                raise SubmitError(explain(exc, target, what)) from exc
        except (HeraException, requests.RequestException) as exc:
            raise SubmitError(explain(exc, target, what)) from exc
        except (ValueError, TypeError) as exc:
            raise SubmitError(f"argo: unexpected answer from {target.host}: {exc}") from exc
    raise AssertionError("unreachable")


def apply_template(
    template: WorkflowTemplate, target: ArgoTarget, *, out: Callable[[str], None] = print
) -> str:
    """Create or update the WorkflowTemplate every run refers to; returns the verb."""
    svc, ns = service(target), target.namespace
    name = template.name or ""

    def create() -> Any:
        model = template.build()
        request = WorkflowTemplateCreateRequest(template=model)  # type: ignore[arg-type]
        return svc.create_workflow_template(request, namespace=ns)

    def update(resource_version: str) -> Any:
        model = template.build()
        model.metadata.resource_version = resource_version  # type: ignore[union-attr]
        request = WorkflowTemplateUpdateRequest(template=model)  # type: ignore[arg-type]
        return svc.update_workflow_template(name, request, namespace=ns)

    get = lambda: svc.get_workflow_template(name, namespace=ns)  # noqa: E731
    verb = _upsert(get, create, update, target, "WorkflowTemplate")
    out(f"WorkflowTemplate {name} {verb} in namespace {ns}")
    return verb


def submit_cron(
    cron: CronWorkflow,
    cfg: PipelineConfig,
    target: ArgoTarget,
    *,
    out: Callable[[str], None] = print,
) -> int:
    """Create the CronWorkflow, or update it in place (as the WorkflowTemplate)."""
    svc, ns = service(target), target.namespace
    name = cron.name or ""

    def create() -> Any:
        request = CreateCronWorkflowRequest(cron_workflow=cron.build())  # type: ignore[arg-type]
        return svc.create_cron_workflow(request, namespace=ns)

    def update(resource_version: str) -> Any:
        model = cron.build()
        model.metadata.resource_version = resource_version  # type: ignore[union-attr]
        request = UpdateCronWorkflowRequest(cron_workflow=model)  # type: ignore[arg-type]
        return svc.update_cron_workflow(name, request, namespace=ns)

    get = lambda: svc.get_cron_workflow(name, namespace=ns)  # noqa: E731
    verb = _upsert(get, create, update, target, "CronWorkflow")
    s = cfg.schedule
    out(f"CronWorkflow {name} {verb} in namespace {ns}: '{s.cron}' ({s.timezone})")
    base = argo_ui(cfg) or target.host.rstrip("/")
    out(f"Argo UI: {base}/cron-workflows/{ns}/{name}")
    return 0
