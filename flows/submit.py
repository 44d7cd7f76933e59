"""Send the pipeline to an Argo server with Hera's WorkflowsService; follow it; schedule it.

Where the server is: ``cluster.argo_host`` or ``ARGO_HOST``; the namespace: the config's
``cluster.namespace`` when the config names one, else ``ARGO_NAMESPACE``, else ``argo``;
TLS verification: ``cluster.verify_tls`` unless ``ARGO_INSECURE_SKIP_VERIFY=true``; the
token only from ``ARGO_TOKEN`` (a secret never lives in a config file). Every answer the
server refuses becomes one line that says what to fix (``SubmitError``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
from pydantic import ValidationError

from flows.manifests.names import FlowError, argo_ui, mlflow_ui, workflow_url
from steps.common.config import ClusterConfig, ConfigError, PipelineConfig, TrackingConfig

DONE = ("Succeeded", "Failed", "Error")
RUN_URL_GLOBAL = "mlflow-run-url"
REQUEST_TIMEOUT_S = 30
POLL_ERRORS_TOLERATED = 3
PORT_FORWARD = "kubectl -n argo port-forward svc/argo-server 2746:2746"


class SubmitError(RuntimeError):
    """The Argo server refused or could not be reached; the message is one line."""


@dataclass(frozen=True)
class ArgoTarget:
    host: str
    namespace: str
    token: str | None
    verify: bool


def resolve_config(cfg: PipelineConfig, environ: Mapping[str, str]) -> PipelineConfig:
    """Fill what the config leaves open from the environment, as the argo and mlflow CLIs
    read it: the Argo server from ``ARGO_SERVER`` (host:port; https unless
    ``ARGO_SECURE=false``, under ``ARGO_BASE_HREF``) or ``ARGO_HOST`` (a URL), the namespace
    from ``ARGO_NAMESPACE``, TLS verification off with ``ARGO_INSECURE_SKIP_VERIFY=true``,
    and the MLflow store from ``MLFLOW_TRACKING_URI`` where tracking.uri is the default."""
    c, updates = cfg.cluster, {}
    if c.argo_host is None and (environ.get("ARGO_SERVER") or environ.get("ARGO_HOST")):
        updates["argo_host"] = argo_server_url(environ)
    if "namespace" not in c.model_fields_set and environ.get("ARGO_NAMESPACE"):
        updates["namespace"] = environ["ARGO_NAMESPACE"]
    if "verify_tls" not in c.model_fields_set and _true(environ.get("ARGO_INSECURE_SKIP_VERIFY")):
        updates["verify_tls"] = False
    tracking = cfg.tracking
    env_uri = environ.get("MLFLOW_TRACKING_URI")
    if env_uri and tracking.uri == TrackingConfig().uri and env_uri != tracking.uri:
        tracking = tracking.model_copy(update={"uri": env_uri})
    if not updates:
        return cfg.model_copy(update={"tracking": tracking})
    try:
        cluster = ClusterConfig.model_validate({**c.model_dump(), **updates})
    except ValidationError as exc:
        problems = "; ".join(f"cluster.{e['loc'][0]}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"from the environment (ARGO_*): {problems}") from None
    return cfg.model_copy(update={"cluster": cluster, "tracking": tracking})


def argo_server_url(environ: Mapping[str, str]) -> str:
    """The Argo server's URL from the argo CLI's variables; ``ARGO_HOST`` is our older name."""
    server = environ.get("ARGO_SERVER", "").strip()
    if not server:
        return environ["ARGO_HOST"]
    if server.startswith(("http://", "https://")):
        base = server
    else:
        secure = environ.get("ARGO_SECURE", "true")
        base = f"{'http' if secure.lower() in ('false', '0', 'no') else 'https'}://{server}"
    href = environ.get("ARGO_BASE_HREF", "").strip("/")
    return f"{base.rstrip('/')}/{href}" if href else base


def _true(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


def preflight(cfg: PipelineConfig, environ: Mapping[str, str]) -> ArgoTarget:
    """Refuse, before contacting anything, a config whose pods could not work together."""
    c, root = cfg.cluster, cfg.storage.root_uri
    if not c.argo_host:
        raise FlowError(
            "no Argo server: set cluster.argo_host, ARGO_SERVER (host:2746) or ARGO_HOST "
            "(https://host:2746)"
        )
    if not c.argo_host.startswith(("http://", "https://")):
        raise FlowError(f"cluster.argo_host {c.argo_host!r}: give a URL, https://host:2746")
    shared = (c.pvc_mount_path.rstrip("/") + "/") if c.pvc else None
    local_root = not root.startswith("s3://")
    if local_root and not (shared and root.removeprefix("file://").startswith(shared)):
        raise FlowError(
            f"storage.root_uri {root!r} is a directory of one machine; pods share s3://bucket/"
            f"prefix, or cluster.pvc with a file:// root under cluster.pvc_mount_path"
        )
    if cfg.tracking.enabled and not cfg.tracking.uri.startswith(("http://", "https://")):
        raise FlowError(
            f"tracking.uri {cfg.tracking.uri!r} is a file in each pod; use an MLflow server "
            "URL (--set tracking.uri=http://mlflow:5000) or tracking.enabled=false"
        )
    return ArgoTarget(c.argo_host, c.namespace, environ.get("ARGO_TOKEN") or None, c.verify_tls)


class _TimeoutSession(requests.Session):
    def request(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        kwargs.setdefault("timeout", REQUEST_TIMEOUT_S)
        return super().request(*args, **kwargs)


def service(target: ArgoTarget) -> WorkflowsService:
    return WorkflowsService(
        host=target.host,
        token=target.token,
        namespace=target.namespace,
        verify_ssl=target.verify,
        session=_TimeoutSession(),
    )


def _detail(exc: Exception) -> str:
    text = str(exc)
    if "`" in text:  # Hera: "Server returned status code 403 with message: `...`"
        text = text.split("`", 1)[1].rsplit("`", 1)[0]
    return " ".join(text.split())[:300]


def explain(exc: Exception, target: ArgoTarget, what: str) -> str:
    """One line for a refused or failed request: what happened and what to do."""
    host, ns, detail = target.host, target.namespace, _detail(exc)
    code = getattr(exc, "status_code", None)
    if isinstance(exc, requests.exceptions.SSLError):
        return (
            f"argo: TLS verification of {host} failed; for a self-signed server set "
            "cluster.verify_tls=false or ARGO_INSECURE_SKIP_VERIFY=true"
        )
    if isinstance(exc, requests.RequestException):
        reason = type(exc).__name__
        return f"argo: cannot reach {host} ({reason}); check ARGO_SERVER, or {PORT_FORWARD}"
    if code == 401:
        given = "the token was refused" if target.token else "no token was given"
        return f"argo: 401 Unauthorized at {host}: {given}; set ARGO_TOKEN='Bearer <token>'"
    if code == 403:
        return f"argo: 403 Forbidden: this token may not create {what} in namespace {ns}: {detail}"
    if code == 404:
        return (
            f"argo: 404 Not Found: namespace {ns} (or the Argo API at {host}) does not exist: "
            f"{detail}; set cluster.namespace or ARGO_NAMESPACE"
        )
    if code == 409:
        return f"argo: 409 Conflict: the {what} already exists in {ns}: {detail}"
    if code == 400:
        return f"argo: 400 Bad Request: the server rejected the {what}: {detail}"
    return f"argo: {code or 'error'} from {host} ({what}): {detail}"


def _call(fn: Callable[[], Any], target: ArgoTarget, what: str) -> Any:
    try:
        return fn()
    except (HeraException, requests.RequestException) as exc:
        raise SubmitError(explain(exc, target, what)) from exc
    except (ValueError, TypeError) as exc:  # a 2xx answer that is not an Argo object
        raise SubmitError(f"argo: unexpected answer from {target.host}: {exc}") from exc


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
    created = _call(
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
