"""Who is the champion: the quality gate in front of the MLflow Model Registry (MLflow 3:
aliases, no stages), and the alias move.

Every benchmarked model is registered as a new version (``steps.benchmark.registered_model``:
the serving pyfunc of the variants it runs), tagged with its dataset digest, workflow,
image, best variant, the image that serves it (``serving_image``) and numbers, and with
the version that held the alias before
(``previous_champion``, ``none`` if none; also the promotion's ``previous_version`` and the
step's ``previous-version`` output): what ``steps.serve_check`` and the workflow's
rollbacks go back to when the deployment or its live check fails, never a version that did
not serve (``steps.benchmark.previous``). The alias (``benchmark.alias``) moves to it only
if its test accuracy is no worse than the champion's by more than
``benchmark.accuracy_margin`` (absolute) and its p50 latency at the gate batch no worse by
more than ``benchmark.latency_margin`` (relative). Latencies measured on different hardware
are not compared: then accuracy alone decides, and the decision says so.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict

import mlflow
import torch
from mlflow.exceptions import MlflowException

from steps.benchmark.previous import (
    NO_PREVIOUS,
    PREVIOUS_TAG,
    previous_version,
    restore_left_alias,
    served_lookup,
)
from steps.benchmark.registered_model import (
    SERVED_BY,
    RegistryError,
    log_served_model,
    runtime,
    served_fastest,
)
from steps.common.config import PipelineConfig
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.promotion import Challenger, Champion, Decision, Promotion
from steps.common.contracts.variants import VariantsManifest
from steps.common.trained_model import TrainedModel


def decide(challenger: Challenger, champion: Champion | None, cfg: PipelineConfig) -> Decision:
    """Promote or not, with the numbers that said so."""
    bench = cfg.benchmark

    def decision(promoted: bool, reason: str) -> Decision:
        margins = bench.accuracy_margin, bench.latency_margin
        return Decision(challenger, champion, *margins, promoted=promoted, reason=reason)

    if champion is None:
        return decision(True, f"first {bench.alias}")
    need_acc = champion.accuracy - bench.accuracy_margin
    acc_ok = challenger.accuracy >= need_acc
    reasons = [
        f"accuracy {challenger.accuracy:.4f} {'>=' if acc_ok else '<'} {need_acc:.4f} "
        f"(champion v{champion.version} {champion.accuracy:.4f} - {bench.accuracy_margin:g})"
    ]
    comparable = (
        challenger.device_name == champion.device_name
        and challenger.gate_batch == champion.gate_batch
        and champion.p50_ms is not None
    )
    lat_ok = True
    if comparable:
        limit = champion.p50_ms * (1 + bench.latency_margin)
        lat_ok = challenger.p50_ms <= limit
        reasons.append(
            f"p50 at batch {challenger.gate_batch} {challenger.p50_ms:.3f} ms "
            f"{'<=' if lat_ok else '>'} {limit:.3f} ms (champion {champion.p50_ms:.3f} ms "
            f"+ {bench.latency_margin:.0%})"
        )
    else:
        reasons.append(
            f"latency not compared: champion measured on {champion.device_name} at batch "
            f"{champion.gate_batch}, this run on {challenger.device_name} at batch "
            f"{challenger.gate_batch}"
        )
    return decision(acc_ok and lat_ok, "; ".join(reasons))


def challenger_of(report: BenchmarkReport) -> Challenger:
    """The report's best variant: its accuracy and p50 at the gate batch."""
    return Challenger(
        accuracy=report.best.accuracy,
        p50_ms=report.best_at_gate.p50_ms,
        gate_batch=report.gate_batch,
        device_name=report.device_name,
        variant=report.best_variant,
    )


def read_champion(client, name: str, alias: str) -> Champion | None:
    """The version holding ``alias`` of ``name``, from its tags; None if the alias is unset."""
    try:
        version = client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST" or "not found" in exc.message.lower():
            return None
        raise RegistryError(f"cannot read alias {alias!r} of {name!r}: {exc.message}") from None
    tags = version.tags
    try:
        return Champion(
            version=version.version,
            accuracy=float(tags["accuracy"]),
            p50_ms=float(tags["p50_ms"]) if tags.get("p50_ms") else None,
            gate_batch=int(tags["gate_batch"]) if tags.get("gate_batch") else None,
            device_name=tags.get("device_name"),
            dataset_digest=tags.get("dataset_digest"),
            mlflow_run_id=tags.get("mlflow_run_id"),
            previous_champion=tags.get(PREVIOUS_TAG),
        )
    except (KeyError, ValueError):
        # A champion set by hand without our tags: compare on nothing, promote nothing.
        raise RegistryError(
            f"{name} v{version.version} (alias {alias}) lacks the accuracy tag the gate needs; "
            "tag it or move the alias by hand"
        ) from None


def promote(
    cfg: PipelineConfig,
    trained: TrainedModel,
    report: BenchmarkReport,
    variants: VariantsManifest,
    run_id: str,
    images: torch.Tensor,
) -> Promotion:
    """Register this run's model, decide against the champion, and move the alias if it
    wins. ``variants``: the variants.json the report measured; ``images``: a few uint8
    test images, the reloaded model's check; ``run_id``: the pipeline's MLflow run."""
    bench = cfg.benchmark
    client = mlflow.MlflowClient()
    fastest = served_fastest(report, variants, bench.accuracy_margin)
    tags = _version_tags(cfg, report, run_id)
    tags["serving"] = "pyfunc: " + ", ".join(f"bs {b} {n}" for b, n in fastest.items())
    image = tags["serving_image"] = cfg.images.image(SERVED_BY[runtime(variants, fastest)])
    info = log_served_model(trained, variants, fastest, cfg.storage, images, bench.registered_model)
    version = str(info.registered_model_version)
    challenger = challenger_of(report)
    # an alias left on an unchecked version by a run that did not succeed (terminated) goes
    # back first: the decision and the rollback are against a champion that served
    try:
        restored = restore_left_alias(client, bench.registered_model, bench.alias, run_id)
    except MlflowException as exc:
        raise RegistryError(f"cannot restore alias {bench.alias}: {exc.message}") from None
    if restored:
        print(f"benchmark: {restored}", file=sys.stderr)
    champion = read_champion(client, bench.registered_model, bench.alias)
    decision = decide(challenger, champion, cfg)
    lookup = served_lookup(client, bench.registered_model, run_id)
    previous = previous_version(asdict(champion) if champion else None, run_id, lookup)
    previous_image = serving_image_of(client, cfg, previous) if previous else ""
    numbers = {
        "accuracy": f"{challenger.accuracy:.6f}",
        "p50_ms": f"{challenger.p50_ms:.6f}",
        "gate_batch": str(challenger.gate_batch),
        "device_name": challenger.device_name,
        PREVIOUS_TAG: previous or NO_PREVIOUS,
    }
    try:
        for key, value in {**tags, **numbers}.items():
            client.set_model_version_tag(bench.registered_model, version, key, value)
        if decision.promoted:
            client.set_registered_model_alias(bench.registered_model, bench.alias, version)
        outcome = "promoted" if decision.promoted else "rejected"
        client.set_model_version_tag(
            bench.registered_model, version, "promotion", f"{outcome}: {decision.reason}"
        )
    except MlflowException as exc:
        raise RegistryError(
            f"cannot tag or alias {bench.registered_model} v{version}: {exc.message}"
        ) from None
    return Promotion.of(
        decision,
        registered_model=bench.registered_model,
        alias=bench.alias,
        version=version,
        model_uri=info.model_uri,
        previous_version=previous,
        served_by_batch=fastest,
        serving_image=image,
        previous_serving_image=previous_image,
    )


def serving_image_of(client, cfg: PipelineConfig, version: str) -> str:
    """The image that serves ``version`` of ``benchmark.registered_model``: its
    ``serving_image`` tag; cifar-serve for a version registered before the tag (a portable
    pyfunc) or one that cannot be read."""
    try:
        tags = client.get_model_version(cfg.benchmark.registered_model, version).tags
    except MlflowException:
        tags = {}
    return tags.get("serving_image") or cfg.images.image(SERVED_BY["portable"])


def _version_tags(cfg: PipelineConfig, report: BenchmarkReport, run_id: str) -> dict[str, str]:
    """What a version says of where it came from: the data, workflow, image and variant."""
    run_tags = mlflow.get_run(run_id).data.tags  # the pipeline's run carries the workflow
    workflow = run_tags.get("argo.workflow") or os.environ.get("ARGO_WORKFLOW_NAME", "local")
    return {
        "dataset_digest": report.dataset_digest,
        "workflow": workflow,
        "image": cfg.images.image("optimize"),
        "best_variant": report.best_variant,
        "optimized_uri": report.optimized_uri,
        "model_uri": report.model_uri,
        "mlflow_run_id": run_id,
    }
