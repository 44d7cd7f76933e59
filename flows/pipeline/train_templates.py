"""The training step: an Argo resource template that creates the job and ends with it.

``train.launcher`` picks the job: a Training Operator v1 PyTorchJob (the step ends with
its Master replica) or a Trainer v2 TrainJob on the project's ClusterTrainingRuntime (the
step ends with its Complete or Failed condition). Either way the pods carry Argo's
workflow label, so ``argo logs <wf> -c pytorch`` (``-c node`` for a TrainJob) and the UI
show every rank. The manifest is a raw input artifact (``manifestFrom``): Argo
substitutes the run's parameters into its text, integers included, which a ``manifest``
string the schema checks as YAML could not hold.
"""

from __future__ import annotations

from typing import Any

from hera.workflows import Artifact, Parameter, RawArtifact, Resource
from hera.workflows import models as m

from flows.manifests import pytorchjob, trainjob
from flows.manifests.names import APP, labels
from flows.manifests.shared_pod import pod_env
from flows.pipeline import parameters
from flows.pipeline.memo_keys import max_age_input, memoize
from flows.pipeline.parameters import input_ref
from flows.pipeline.reuse_templates import RUN_OUTPUT, WORKFLOW_OUTPUT
from steps.common.config import PipelineConfig

ARGO_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"  # how argo logs finds a pod
JOB_DEADLINE_MARGIN_S = 900  # the job's own deadline fires first and says why
MANIFEST_PATH = "/tmp/manifest.yaml"
MULTINODE = "train-multinode"
JOB_RESOURCES = {  # kubectl's name of each launcher's job
    "pytorchjob": "pytorchjobs.kubeflow.org",
    "trainjob": "trainjobs.trainer.kubeflow.org",
}
DELETE_DEADLINE_S = 300
CONDITIONS = {
    "pytorchjob": (pytorchjob.SUCCESS, pytorchjob.FAILURE),
    "trainjob": (trainjob.SUCCESS, trainjob.FAILURE),
}


# The job's owner, written into its manifest: Argo's setOwnerReference adds the owner only
# to an inline ``resource.manifest`` (v4.0.5 workflow/controller/operator.go
# executeResource), while argoexec creates a ``manifestFrom`` artifact's text as it is
# (cmd/argoexec/commands/resource.go execResource). Written here, every job is owned
# either way, as Argo would own it (metav1.NewControllerRef): deleting the workflow
# (``argo delete``, its ttlStrategy) deletes the job and the job's pods.
OWNER = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Workflow",
    "name": "{{workflow.name}}",
    "uid": "{{workflow.uid}}",
    "controller": True,
    "blockOwnerDeletion": True,
}


# What the job says of its own run, read back as the step's outputs (``kubectl get -o
# jsonpath``, v4.0.5 workflow/executor/resource.go SaveResourceParameters: a resource
# template's outputs come from the object alone). So the memo entry of a training step
# holds where the model is and which workflow and MLflow run trained it; a hit hands them
# on. (kubectl's JSONPath ends a field name at ``.``, not at ``-`` or ``/``.)
JOB_NOTES = {
    "model-uri": input_ref("model-uri"),
    RUN_OUTPUT: input_ref("run-id"),
    WORKFLOW_OUTPUT: "{{workflow.name}}",
}


def job_annotations() -> dict[str, str]:
    return {f"{APP}/{name}": value for name, value in JOB_NOTES.items()}


def job_labels(cfg: PipelineConfig) -> dict[str, str]:
    return {
        **labels(cfg),
        f"{APP}/step": "train",
        f"{APP}/workflow": "{{workflow.name}}",
        ARGO_WORKFLOW_LABEL: "{{workflow.name}}",
    }


def job_manifest(cfg: PipelineConfig, settings: list[str], *, multinode: bool = False) -> str:
    """The job's YAML, ``{{workflow.parameters.x}}`` where a run may change a value (a
    PyTorchJob for one node, or for several: ``multinode``)."""
    args = [
        "-m",
        "steps.train",
        "--dataset",
        input_ref("dataset-uri"),
        "--output",
        input_ref("model-uri"),
    ]
    args += ["--mlflow-run-id", input_ref("run-id"), *settings]
    spec: dict[str, Any] = dict(
        args=args,
        env=pod_env(cfg),
        labels=job_labels(cfg),
        owner=OWNER,
        annotations=job_annotations(),
    )
    refs = {n: parameters.ref(n) for n in ("nodes", "gpus-per-node", "nproc-per-node")}
    refs["workers"] = "{{=asInt(workflow.parameters.nodes) - 1}}"
    if cfg.train.launcher == "trainjob":
        return trainjob.parameterized_manifest(cfg, refs=refs, **spec)
    return pytorchjob.parameterized_manifest(cfg, refs=refs, multinode=multinode, **spec)


def train_templates(
    cfg: PipelineConfig, settings: list[str], *, source_keys: bool = False
) -> list[tuple[Resource, str | None]]:
    """The training step's templates, each with the ``when`` that picks it (None: always).

    One for a TrainJob; two for a PyTorchJob: the Training Operator's webhook refuses a
    Worker replica of 0, so ``train`` (the Master alone) runs when the ``nodes``
    parameter is 1 and ``train-multinode`` (Master + nodes - 1 Workers) when it is more;
    the other one is Skipped. Both are memoized with one key (flows/pipeline/memo_keys.py): the
    number of nodes is in it, as a parameter.
    """
    if cfg.train.launcher != "pytorchjob":
        return [(train_template(cfg, settings, source_keys=source_keys), None)]
    nodes = parameters.ref("nodes")
    return [
        (train_template(cfg, settings, multinode=False, source_keys=source_keys), f"{nodes} <= 1"),
        (train_template(cfg, settings, multinode=True, source_keys=source_keys), f"{nodes} > 1"),
    ]


def train_template(
    cfg: PipelineConfig,
    settings: list[str],
    *,
    multinode: bool = False,
    source_keys: bool = False,
) -> Resource:
    """``multinode``: the PyTorchJob with Workers, as template ``train-multinode``. The
    manifest is the raw input artifact ``manifest`` (``manifestFrom``); the outputs are
    the job's name and what ``JOB_NOTES`` wrote into it."""
    text = job_manifest(cfg, settings, multinode=multinode)
    inputs: list[Parameter | Artifact] = [
        Parameter(name=n) for n in ("dataset-uri", "model-uri", "run-id")
    ]
    inputs.append(max_age_input(cfg, "train"))
    inputs.append(RawArtifact(name="manifest", path=MANIFEST_PATH, data=text))
    notes = [
        Parameter(
            name=name,
            value_from=m.ValueFrom(json_path=f"{{.metadata.annotations.{APP}/{name}}}"),
        )
        for name in JOB_NOTES
    ]
    success, failure = CONDITIONS[cfg.train.launcher]
    return Resource(
        name=MULTINODE if multinode else "train",
        action="create",  # owned through the manifest's ownerReferences (OWNER)
        success_condition=success,
        failure_condition=failure,
        inputs=inputs,
        manifest_from=m.ManifestFrom(artifact=m.Artifact(name="manifest")),
        outputs=[
            Parameter(name="job-name", value_from=m.ValueFrom(json_path="{.metadata.name}")),
            *notes,
        ],
        memoize=memoize(cfg, "train", source=source_keys),
        active_deadline_seconds=cfg.cluster.active_deadline_seconds + JOB_DEADLINE_MARGIN_S,
        labels={f"{APP}/step": "train"},
    )


def delete_when() -> str:
    """The exit handler's ``when`` for ``delete-train-job``: the workflow did not succeed
    and training itself did not either (a failed job, its step's deadline, a run stopped
    while it trained). A job that succeeded is kept, whatever failed after it: its
    finished pods hold the only copy of the ranks' logs (``archiveLogs`` keeps Argo's pods'
    logs only), and they hold no GPU.

    Argo gives the exit handler no ``tasks.*``; ``workflow.failures`` lists every Failed
    or Errored node with its ``templateName`` (v4.0.5 workflow/controller/operator.go,
    after the entrypoint: JSON, then ``strconv.Quote``-d, so inside the expression the
    quotes around names come with a backslash). An expression tag reads it from the
    environment rather than as text substituted into govaluate, whose strings a node's
    message (``Stopped with strategy 'Stop'``) would break; the pattern allows the
    characters between key and name to be either form."""
    names = "|".join(name for name in (MULTINODE, "train"))
    pattern = f"templateName[^a-z]+({names})[^a-z-]"
    return f"{{{{=workflow.status != 'Succeeded' && workflow.failures matches '{pattern}'}}}}"


def delete_template(cfg: PipelineConfig) -> Resource:
    """The exit handler's delete of this run's training job, found by Argo's workflow label
    (the exit handler cannot read the train step's ``job-name``; a run stopped before the
    job existed deletes nothing).

    With no manifest Argo runs ``kubectl delete --ignore-not-found <flags> -o name``
    (v4.0.5 workflow/executor/resource.go getKubectlArguments): a job already gone is no
    error, and a delete may carry no conditions or outputs (cmd/argoexec/commands/
    resource.go execResource). The job's runPolicy (PyTorchJob) or JobSet (TrainJob)
    takes its pods with it."""
    selector = f"{ARGO_WORKFLOW_LABEL}={{{{workflow.name}}}}"
    return Resource(
        name="delete-train-job",
        action="delete",
        flags=[JOB_RESOURCES[cfg.train.launcher], "--selector", selector],
        active_deadline_seconds=DELETE_DEADLINE_S,
        labels={f"{APP}/step": "delete-train-job"},
    )
