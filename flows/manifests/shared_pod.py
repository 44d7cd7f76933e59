"""What every pod of the pipeline shares: the config as ``--set`` arguments, the environment
(Secrets by reference only) and the security context.

The config reaches a pod as command-line arguments: one ``--set section.field=value`` for
each field of the step sections (and ``cluster``) that differs from the defaults in
``steps/common/config/``, so a
step rebuilds exactly the config the flow was given, with no file in the image and no
ConfigMap. ``config_args`` proves that by loading its own output back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from hera.workflows import models as m
from kubernetes import client as k8s

from flows.errors import FlowError
from steps.common.config import ConfigError, PipelineConfig, load_config

OUTPUTS_DIR = "/tmp/outputs"  # where the steps write their output parameters
# What reaches every step as --set: the steps' own sections, and the cluster the run went
# to, so that MLflow's params (every section, steps.train.report) describe this run.
STEP_SECTIONS = (
    "data", "storage", "train", "optimize", "benchmark", "tracking", "cluster", "serving",
)  # fmt: skip
DATA_VOLUME = "data"
ISTIO_INJECT = "sidecar.istio.io/inject"  # = kubeflow.training.constants.ISTIO_SIDECAR_INJECTION


def render_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def config_args(cfg: PipelineConfig) -> list[str]:
    """``--set`` arguments that turn the default config into ``cfg`` (step sections only)."""
    defaults = PipelineConfig().model_dump(mode="json", include=set(STEP_SECTIONS))
    wanted = cfg.model_dump(mode="json", include=set(STEP_SECTIONS))
    overrides = [
        f"{section}.{name}={render_value(value)}"
        for section in STEP_SECTIONS
        for name, value in wanted[section].items()
        if defaults[section][name] != value
    ]
    try:
        rebuilt = load_config(None, overrides).model_dump(mode="json", include=set(STEP_SECTIONS))
    except ConfigError as exc:
        raise FlowError(f"{exc}: the value does not survive --set; simplify it") from None
    if rebuilt != wanted:
        changed = [
            f"{s}.{k}" for s in STEP_SECTIONS for k in wanted[s] if rebuilt[s][k] != wanted[s][k]
        ]
        raise FlowError(f"{', '.join(changed)}: the value does not survive --set; simplify it")
    return [arg for override in overrides for arg in ("--set", override)]


@dataclass(frozen=True)
class EnvSpec:
    """One environment variable: a literal value, or a key of a Secret (never its value);
    ``optional``: a missing Secret leaves the variable unset instead of stopping the pod in
    CreateContainerConfigError."""

    name: str
    value: str | None = None
    secret: str | None = None
    optional: bool | None = None

    def hera(self) -> m.EnvVar:
        if self.secret is None:
            return m.EnvVar(name=self.name, value=self.value)
        ref = m.SecretKeySelector(name=self.secret, key=self.name, optional=self.optional)
        return m.EnvVar(name=self.name, value_from=m.EnvVarSource(secret_key_ref=ref))

    def k8s(self) -> k8s.V1EnvVar:
        if self.secret is None:
            return k8s.V1EnvVar(name=self.name, value=self.value)
        ref = k8s.V1SecretKeySelector(name=self.secret, key=self.name, optional=self.optional)
        return k8s.V1EnvVar(name=self.name, value_from=k8s.V1EnvVarSource(secret_key_ref=ref))


def uses_s3(cfg: PipelineConfig) -> bool:
    return any(uri.startswith("s3://") for uri in (cfg.storage.root_uri, cfg.data.source))


def pod_env(cfg: PipelineConfig) -> list[EnvSpec]:
    """The environment of every step pod and training rank: MLflow and S3 endpoints, and the
    steps' credentials by reference (the S3 keys of ``cluster.s3_secret`` where some URI is
    s3://; the MLflow user of ``cluster.mlflow_secret`` when it is set)."""
    c = cfg.cluster
    return _env(cfg, s3_secret=c.s3_secret, mlflow_secret=c.mlflow_secret)


def predictor_env(cfg: PipelineConfig) -> list[EnvSpec]:
    """The InferenceService's environment: as a step's, with the predictor's own credentials
    (``cluster.predictor_s3_secret``, ``cluster.predictor_mlflow_secret``), which may read
    the models and change nothing: the predictor serves the world and never holds the
    steps' keys."""
    c = cfg.cluster
    return _env(cfg, s3_secret=c.predictor_s3_secret, mlflow_secret=c.predictor_mlflow_secret)


def _env(cfg: PipelineConfig, *, s3_secret: str, mlflow_secret: str | None) -> list[EnvSpec]:
    """MLflow's own variables (MLFLOW_TRACKING_URI; USERNAME and PASSWORD from the Secret,
    never a config field, so never a ``--set`` argument or a logged param) and S3's. Every
    Secret is required: a missing one stops the pod at its start, naming the Secret
    (CreateContainerConfigError), rather than a step failing at its first request."""
    env = [EnvSpec("PYTHONUNBUFFERED", "1"), EnvSpec("MLFLOW_TRACKING_URI", cfg.tracking.uri)]
    if mlflow_secret:
        env += [
            EnvSpec("MLFLOW_TRACKING_USERNAME", secret=mlflow_secret),
            EnvSpec("MLFLOW_TRACKING_PASSWORD", secret=mlflow_secret),
        ]
    if uses_s3(cfg):
        env += [
            EnvSpec("AWS_ACCESS_KEY_ID", secret=s3_secret),
            EnvSpec("AWS_SECRET_ACCESS_KEY", secret=s3_secret),
        ]
    if cfg.storage.endpoint_url:
        env.append(EnvSpec("AWS_ENDPOINT_URL", cfg.storage.endpoint_url))
    if cfg.storage.region:
        env.append(EnvSpec("AWS_DEFAULT_REGION", cfg.storage.region))
    return env


def container_security(cfg: PipelineConfig) -> dict[str, Any]:
    """Container securityContext (Kubernetes JSON): no root, no escalation, no capabilities.

    The one exception is the training container with RDMA locking memory as root
    (flows/manifests/network.py training_security: a capability added to a container that
    runs as a non-root uid is not in its effective set, kubernetes/kubernetes#56374)."""
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security(cfg: PipelineConfig) -> dict[str, Any]:
    uid = cfg.cluster.run_as_user
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


# A field an Argo parameter sets at submission holds a sentinel while the manifest is built
# and serialised; then the sentinel, quotes included, becomes the parameter's ``{{...}}``.
# The CRDs type replicas and node counts as integers: a quoted "{{...}}" would reach the
# API server as a string and be refused.
SENTINEL = re.compile(r"'?@@([a-z-]+)@@'?")


def sentinel(name: str) -> str:
    return f"@@{name}@@"


def fill_sentinels(text: str, refs: dict[str, str]) -> str:
    return SENTINEL.sub(lambda match: refs[match.group(1)], text)


def toleration(spec: dict[str, Any]) -> k8s.V1Toleration:
    """A config toleration (Kubernetes JSON, keys checked by the config) as the client's model."""
    return k8s.V1Toleration(
        key=spec.get("key"),
        operator=spec.get("operator"),
        value=spec.get("value"),
        effect=spec.get("effect"),
        toleration_seconds=spec.get("tolerationSeconds"),
    )
