"""A step of the pipeline as an Argo container template: its CLI in its versioned image,
the config as ``--set`` arguments, resources, placement, security, retries, deadline; and
its outputs: parameters read from files, report files as artifacts.

No step's own code calls the Kubernetes API (they talk to S3, MLflow and the predictor), so
their pods carry no token of the workflow's account, which may create training jobs and
InferenceServices: ``automountServiceAccountToken: false`` and the executor's own account
(``executor.serviceAccountName``), as Argo documents it (v4.0.5 docs/security.md, "Workflow
Pod Permissions"; docs/fields.md ``automountServiceAccountToken``: "ServiceAccountName of
ExecutorConfig must be specified if this value is false"). Argo v4.0.5
workflow/controller/workflowpod.go setupServiceAccount then sets the pod's
``automountServiceAccountToken: false`` and mounts the executor account's token Secret
(``<account>.service-account-token``, util/secrets/secret_name.go) as the volume
``exec-sa-token``, which newExecContainer mounts at /var/run/secrets/kubernetes.io/
serviceaccount in the init and wait containers only: the main container, the step's code,
has no token. Resource templates (the job, the InferenceService) keep the workflow's
account: their main container is argoexec running kubectl."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hera.workflows import Artifact, Container, NoneArchiveStrategy, Parameter, RetryStrategy
from hera.workflows import models as m

from flows.manifests.names import APP
from flows.manifests.shared_pod import DATA_VOLUME, OUTPUTS_DIR, container_security, pod_env
from steps.common.config import PipelineConfig

# A step's exit 2 is a user error (steps/common/step_cli.py): the same parameters fail the
# same way, so a retry only delays the one line that says what to change (an unreachable
# data source among them). Argo v4.0.5 workflow/controller/operator.go processNodeRetries
# evaluates the expression after each failed attempt and fails the node when it is false;
# buildRetryStrategyLocalScope gives lastRetry.exitCode as a string ("-1" for a pod that
# never exited, which is retried): retry_expression compares it with the codes as strings.
USER_ERROR_EXIT = 2
TRACKING_DEADLINE_S = 600
TRACKING_RESOURCES = m.ResourceRequirements(
    requests={"cpu": "250m", "memory": "512Mi"}, limits={"memory": "1Gi"}
)
# The report artifacts are copies of what the MLflow run holds: deleted with the workflow.
# Pod logs (archiveLogs) follow the workflow-level strategy, none: they outlive it.
REPORT_GC = m.ArtifactGC(strategy="OnWorkflowDeletion")


def container_step(
    cfg: PipelineConfig,
    *,
    name: str,
    image: str,
    module: str,
    args: Sequence[str],
    inputs: Sequence[str | Parameter] = (),
    outputs: Sequence[Parameter | Artifact] = (),
    settings: Sequence[str],
    gpus: int = 0,
    tracking: bool = False,
    final_exit_codes: Sequence[int] = (),
    **extra: Any,
) -> Container:
    """A container template running one step's CLI (``python -m <module> <args>``) in its
    versioned image; ``tracking``: a small MLflow bookkeeping step. A fault is retried
    (``cluster.retry_limit``, backoff doubling), whatever ended the attempt, except a user
    error (exit 2) or an exit with one of ``final_exit_codes``: the step's verdict, which a
    retry would only repeat or, worse, overturn (``retry_expression``)."""
    c = cfg.cluster
    if tracking:
        resources, deadline = TRACKING_RESOURCES, TRACKING_DEADLINE_S
    else:
        requests: dict[str, Any] = {"cpu": c.step_cpu, "memory": c.step_memory}
        limits: dict[str, Any] = {"memory": c.step_memory}
        if gpus:
            requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
        resources = m.ResourceRequirements(requests=requests, limits=limits)
        deadline = c.step_deadline_seconds
    placement: dict[str, Any] = {}
    if gpus:  # GPU steps go where the GPUs are; CPU steps anywhere
        placement["node_selector"] = dict(c.node_selector) or None
        placement["tolerations"] = [m.Toleration.model_validate(t) for t in c.tolerations] or None
    if c.pvc:
        placement["volume_mounts"] = [m.VolumeMount(name=DATA_VOLUME, mount_path=c.pvc_mount_path)]
    return Container(
        name=name,
        image=cfg.images.image(image),  # type: ignore[arg-type]
        image_pull_policy=cfg.images.pull_policy,
        command=["python", "-m", module],
        args=[*args, *settings],
        env=[item.hera() for item in pod_env(cfg)],
        resources=resources,
        security_context=m.SecurityContext.model_validate(container_security(cfg)),
        inputs=[i if isinstance(i, Parameter) else Parameter(name=i) for i in inputs] or None,
        outputs=list(outputs) or None,
        retry_strategy=RetryStrategy(
            limit=c.retry_limit,
            retry_policy="Always",
            backoff=m.Backoff(duration=c.retry_backoff, factor=2),
            expression=retry_expression((USER_ERROR_EXIT, *final_exit_codes)),
        ),
        active_deadline_seconds=deadline,
        labels={f"{APP}/step": name},
        **no_token(cfg),
        **placement,
        **extra,
    )


def no_token(cfg: PipelineConfig) -> dict[str, Any]:
    """A container template's fields that keep the workflow account's token out of its pod:
    the executor (init, wait) reports as ``cluster.executor_service_account``, whose Role
    allows only its WorkflowTaskResults (configs/cluster/pipeline/executor-rbac.yaml)."""
    executor = m.ExecutorConfig(service_account_name=cfg.cluster.executor_service_account)
    return {"automount_service_account_token": False, "executor": executor}


def retry_expression(final_exit_codes: Sequence[int]) -> str | None:
    """``retryStrategy.expression`` retrying every attempt but one that exited with a final
    code. Argo (v4.0.5 workflow/controller/operator.go processNodeRetries) evaluates it
    after the limit and backoff allow a retry, with ``lastRetry.exitCode`` a string, "-1"
    when the pod reported none (buildRetryStrategyLocalScope); with ``retryPolicy:
    Always`` a pod's Error is retried too."""
    if not final_exit_codes:
        return None
    codes = ", ".join(f"'{code}'" for code in sorted(set(final_exit_codes)))
    return f"!(lastRetry.exitCode in [{codes}])"


def file_output(name: str, file: str, global_name: str | None = None) -> Parameter:
    """An output parameter read from a file the step writes under ``--outputs-dir``."""
    source = m.ValueFrom(path=f"{OUTPUTS_DIR}/{file}")
    return Parameter(name=name, value_from=source, global_name=global_name)


def report_artifact(name: str, file: str, *, optional: bool | None = None) -> Artifact:
    """A report file the step writes under ``--outputs-dir``, shown in the Argo UI as it is
    (not archived); ``optional``: a failed run may lack it."""
    return Artifact(
        name=name,
        path=f"{OUTPUTS_DIR}/{file}",
        archive=NoneArchiveStrategy(),
        optional=optional,
        artifact_gc=REPORT_GC,
    )
