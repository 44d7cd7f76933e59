"""The Argo server a submission goes to: where it is (config first, then the argo CLI's
environment), what must hold before anything is sent, the Hera service that talks to it,
and every refusal or failure explained in one line (``SubmitError``).

Where the server is: ``cluster.argo_host``, else ``ARGO_SERVER`` / ``ARGO_HOST``; the
namespace: the config's ``cluster.namespace`` when the config names one, else
``ARGO_NAMESPACE``, else ``argo``; TLS verification: ``cluster.verify_tls`` unless
``ARGO_INSECURE_SKIP_VERIFY=true``; the token only from ``ARGO_TOKEN`` (a secret never lives
in a config file).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests
from hera.exceptions import HeraException
from hera.workflows import WorkflowsService
from pydantic import ValidationError

from flows.errors import FlowError, SubmitError
from steps.common.config import ClusterConfig, ConfigError, PipelineConfig, TrackingConfig

REQUEST_TIMEOUT_S = 30
PORT_FORWARD = "kubectl -n argo port-forward svc/argo-server 2746:2746"


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


def call(fn: Callable[[], Any], target: ArgoTarget, what: str) -> Any:
    try:
        return fn()
    except (HeraException, requests.RequestException) as exc:
        raise SubmitError(explain(exc, target, what)) from exc
    except (ValueError, TypeError) as exc:  # a 2xx answer that is not an Argo object
        raise SubmitError(f"argo: unexpected answer from {target.host}: {exc}") from exc
