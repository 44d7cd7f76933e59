"""The workflow-level fields the WorkflowTemplate carries (and the CronWorkflow its labels
and annotations): namespace, account, labels, pod security, TTL, pod and artifact GC, the
mutex, the data volume. Pure data from the config; flows/cifar.py builds the rest."""

from __future__ import annotations

from typing import Any

from hera.workflows import models as m

from flows.manifests.names import annotations, labels
from flows.manifests.shared_pod import DATA_VOLUME, ISTIO_INJECT, pod_security
from steps.common.config import PipelineConfig


def workflow_spec(
    cfg: PipelineConfig, git_revision: str | None, *, entrypoint: str, on_exit: str
) -> dict[str, Any]:
    """Workflow-level fields of the WorkflowTemplate (labels and annotations also the
    CronWorkflow's)."""
    c = cfg.cluster
    pod_notes = {} if c.istio_inject else {ISTIO_INJECT: "false"}
    spec: dict[str, Any] = dict(
        namespace=c.namespace,
        entrypoint=entrypoint,
        on_exit=on_exit,
        service_account_name=c.service_account,
        labels=labels(cfg),
        annotations=annotations(cfg, git_revision),
        pod_metadata=m.Metadata(labels=labels(cfg), annotations=pod_notes or None),
        security_context=m.PodSecurityContext.model_validate(pod_security(cfg)),
        ttl_strategy=m.TTLStrategy(
            seconds_after_success=c.ttl_after_success_s,
            seconds_after_failure=c.ttl_after_failure_s,
        ),
        pod_gc=m.PodGC(strategy=c.pod_gc),
        # every pod's log to the artifact repository: it outlives the workflow's TTL
        archive_logs=True,
        # the GC pod of the report artifacts runs as the workflow's service account; a
        # failed GC leaves the objects, never a workflow stuck on its finalizer
        artifact_gc=m.WorkflowLevelArtifactGC(
            service_account_name=c.service_account, force_finalizer_removal=True
        ),
    )
    if c.mutex:  # a scheduled and a manual run never overlap (no ConfigMap needed)
        spec["synchronization"] = m.Synchronization(mutexes=[m.Mutex(name=c.mutex)])
    if c.pvc:
        claim = m.PersistentVolumeClaimVolumeSource(claim_name=c.pvc)
        spec["volumes"] = [m.Volume(name=DATA_VOLUME, persistent_volume_claim=claim)]
    return spec
