"""The quality gate in front of the MLflow Model Registry (MLflow 3: aliases, no stages).

Every benchmarked model is logged (``log_model(..., name=...)``, torch.export format, so it
reloads without this code), reloaded once, and registered as a new version tagged with its
dataset digest, workflow, image, best variant and numbers, and with the version that held
the alias before (``previous_champion``, ``none`` if none; also ``previous_version`` in the
decision and the step's ``previous-version`` output): what ``steps.serve_check`` and the
workflow's rollbacks go back to when the deployment or its live check fails, never a
version that did not serve (``steps.benchmark.previous``). The alias (``champion``) moves to
it only if its test accuracy is no worse than the champion's by more than
``benchmark.accuracy_margin`` (absolute) and its p50 latency at the gate batch no worse by
more than ``benchmark.latency_margin`` (relative). Latencies measured on different hardware
are not compared: then accuracy alone decides, and the decision says so.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import mlflow
import numpy as np
import torch
from mlflow.exceptions import MlflowException
from mlflow.models.signature import ModelSignature
from mlflow.types import Schema, TensorSpec

from steps.benchmark.previous import NO_PREVIOUS, PREVIOUS_TAG, previous_version, served_lookup
from steps.common.config import PipelineConfig
from steps.common.trained_model import TrainedModel

LOGGED_NAME = "classifier"


class RegistryError(RuntimeError):
    """The model could not be registered, reloaded, or its alias moved."""


def decide(
    challenger: dict[str, Any], champion: dict[str, Any] | None, cfg: PipelineConfig
) -> dict[str, Any]:
    """Promote or not, with the numbers; ``challenger``/``champion`` carry accuracy, p50_ms,
    gate_batch and device_name (the champion's from its version tags)."""
    bench = cfg.benchmark
    decision: dict[str, Any] = {
        "challenger": challenger,
        "champion": champion,
        "accuracy_margin": bench.accuracy_margin,
        "latency_margin": bench.latency_margin,
    }
    if champion is None:
        return {**decision, "promoted": True, "reason": f"first {bench.alias}"}
    need_acc = champion["accuracy"] - bench.accuracy_margin
    acc_ok = challenger["accuracy"] >= need_acc
    reasons = [
        f"accuracy {challenger['accuracy']:.4f} {'>=' if acc_ok else '<'} {need_acc:.4f} "
        f"(champion v{champion.get('version')} {champion['accuracy']:.4f} - "
        f"{bench.accuracy_margin:g})"
    ]
    comparable = (
        challenger["device_name"] == champion.get("device_name")
        and challenger["gate_batch"] == champion.get("gate_batch")
        and champion.get("p50_ms") is not None
    )
    lat_ok = True
    if comparable:
        limit = champion["p50_ms"] * (1 + bench.latency_margin)
        lat_ok = challenger["p50_ms"] <= limit
        reasons.append(
            f"p50 at batch {challenger['gate_batch']} {challenger['p50_ms']:.3f} ms "
            f"{'<=' if lat_ok else '>'} {limit:.3f} ms (champion {champion['p50_ms']:.3f} ms "
            f"+ {bench.latency_margin:.0%})"
        )
    else:
        reasons.append(
            f"latency not compared: champion measured on {champion.get('device_name')} at batch "
            f"{champion.get('gate_batch')}, this run on {challenger['device_name']} at batch "
            f"{challenger['gate_batch']}"
        )
    return {**decision, "promoted": acc_ok and lat_ok, "reason": "; ".join(reasons)}


def _champion(client, name: str, alias: str) -> dict[str, Any] | None:
    try:
        version = client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST" or "not found" in exc.message.lower():
            return None
        raise RegistryError(f"cannot read alias {alias!r} of {name!r}: {exc.message}") from None
    tags = version.tags
    try:
        return {
            "version": version.version,
            "accuracy": float(tags["accuracy"]),
            "p50_ms": float(tags["p50_ms"]) if tags.get("p50_ms") else None,
            "gate_batch": int(tags["gate_batch"]) if tags.get("gate_batch") else None,
            "device_name": tags.get("device_name"),
            "dataset_digest": tags.get("dataset_digest"),
            "mlflow_run_id": tags.get("mlflow_run_id"),
            "previous_champion": tags.get(PREVIOUS_TAG),
        }
    except (KeyError, ValueError):
        # A champion set by hand without our tags: compare on nothing, promote nothing.
        raise RegistryError(
            f"{name} v{version.version} (alias {alias}) lacks the accuracy tag the gate needs; "
            "tag it or move the alias by hand"
        ) from None


def log_and_reload(trained: TrainedModel, example: torch.Tensor, name: str):
    """Log the FP32 model in torch.export format, registered under ``name``; reload it once
    and check that it predicts as the model in memory does."""
    model = copy.deepcopy(trained.model).to("cpu").eval()
    x = example[:2].detach().float().cpu().contiguous()
    shape = (-1, *trained.meta["input_shape"])
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), shape)]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, len(trained.classes)))]),
    )
    try:
        info = mlflow.pytorch.log_model(
            model,
            name=LOGGED_NAME,
            registered_model_name=name,
            signature=signature,
            input_example=x.numpy(),
            serialization_format="pt2",
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"],
            step=0,
        )
        reloaded = mlflow.pytorch.load_model(info.model_uri)
    except MlflowException as exc:
        raise RegistryError(f"cannot log or reload the model as {name!r}: {exc.message}") from None
    with torch.inference_mode():
        expected, got = model(x), reloaded(x)
    if not torch.allclose(expected, got, atol=1e-4):
        raise RegistryError(f"{info.model_uri} reloads but predicts differently from the model")
    return info


def log_served_and_reload(
    cfg: PipelineConfig,
    trained: TrainedModel,
    report: dict[str, Any],
    pixels: np.ndarray,
    fastest: dict[str, str],
):
    """Log the serving pyfunc (``steps.common.serving``), registered; reload it once through
    MLflow and check it classifies the example as eager FP32 does."""
    from steps.common.optimized_variants import read_variants
    from steps.common.serving.log import log_served_model

    name = cfg.benchmark.registered_model
    doc = read_variants(report["optimized_uri"], cfg.storage)
    meta = {"classes": trained.classes, "mean": list(trained.mean), "std": list(trained.std)}
    try:
        info, _ = log_served_model(
            fastest, doc, report["optimized_uri"], cfg.storage, meta, name, LOGGED_NAME, pixels
        )
        got = mlflow.pyfunc.load_model(info.model_uri).predict(pixels)
    except MlflowException as exc:
        raise RegistryError(f"cannot log or reload the model as {name!r}: {exc.message}") from None
    x = torch.from_numpy(pixels).permute(0, 3, 1, 2).float()
    x = (x / 255 - torch.tensor(trained.mean).view(1, 3, 1, 1)) / torch.tensor(trained.std).view(
        1, 3, 1, 1
    )
    with torch.inference_mode():
        expected = trained.model.cpu()(x).argmax(1).tolist()
    if got["class"].tolist() != expected:
        raise RegistryError(f"{info.model_uri} reloads but classifies differently from the model")
    return info


def register_and_gate(
    cfg: PipelineConfig,
    trained: TrainedModel,
    example: torch.Tensor,
    challenger: dict[str, Any],
    tags: dict[str, str],
    served=None,
) -> dict[str, Any]:
    """Register a version, decide against the current champion, move the alias if it wins.
    ``served``: a callable logging the serving model (else the torch.export model)."""
    bench = cfg.benchmark
    client = mlflow.MlflowClient()
    info = served() if served else log_and_reload(trained, example, bench.registered_model)
    version = str(info.registered_model_version)
    champion = _champion(client, bench.registered_model, bench.alias)
    decision = decide(challenger, champion, cfg)
    lookup = served_lookup(client, bench.registered_model)
    previous = previous_version(champion, tags.get("mlflow_run_id"), lookup)
    numbers = {
        "accuracy": f"{challenger['accuracy']:.6f}",
        "p50_ms": f"{challenger['p50_ms']:.6f}",
        "gate_batch": str(challenger["gate_batch"]),
        "device_name": challenger["device_name"],
        PREVIOUS_TAG: previous or NO_PREVIOUS,
    }
    try:
        for key, value in {**tags, **numbers}.items():
            client.set_model_version_tag(bench.registered_model, version, key, value)
        if decision["promoted"]:
            client.set_registered_model_alias(bench.registered_model, bench.alias, version)
        outcome = "promoted" if decision["promoted"] else "rejected"
        client.set_model_version_tag(
            bench.registered_model, version, "promotion", f"{outcome}: {decision['reason']}"
        )
    except MlflowException as exc:
        raise RegistryError(
            f"cannot tag or alias {bench.registered_model} v{version}: {exc.message}"
        ) from None
    return {
        **decision,
        "registered_model": bench.registered_model,
        "alias": bench.alias,
        "version": version,
        "model_uri": info.model_uri,
        "previous_version": previous,
    }


def promote_best(
    cfg: PipelineConfig,
    trained: TrainedModel,
    report: dict[str, Any],
    example,
    run_id: str,
    pixels: np.ndarray | None = None,
) -> dict[str, Any]:
    """The gate for a benchmark report: the best variant's accuracy and p50 at the gate
    batch against the champion's; tags name the data, workflow, image and variant."""
    best = report["variants"][report["best_variant"]]
    gate = str(report["gate_batch"])
    challenger = {
        "accuracy": best["accuracy"],
        "p50_ms": best["batches"][gate]["p50_ms"],
        "gate_batch": report["gate_batch"],
        "device_name": report["device_name"],
        "variant": report["best_variant"],
    }
    run_tags = mlflow.get_run(run_id).data.tags  # the pipeline's run carries the workflow
    workflow = run_tags.get("argo.workflow") or os.environ.get("ARGO_WORKFLOW_NAME", "local")
    tags = {
        "dataset_digest": report["dataset_digest"],
        "workflow": workflow,
        "image": cfg.images.image("optimize"),
        "best_variant": report["best_variant"],
        "optimized_uri": report["optimized_uri"],
        "model_uri": report["model_uri"],
        "mlflow_run_id": run_id,
    }
    served, fastest = None, {}
    if pixels is not None:
        from steps.common.optimized_variants import read_variants
        from steps.common.serving.log import portable_fastest

        doc = read_variants(report["optimized_uri"], cfg.storage)
        fastest = portable_fastest(report, doc, cfg.benchmark.accuracy_margin)
        if fastest:  # else no portable runtime here: the torch.export model is registered
            tags["serving"] = "pyfunc: " + ", ".join(f"bs {b} {n}" for b, n in fastest.items())

            def served():
                return log_served_and_reload(cfg, trained, report, pixels, fastest)

    decision = register_and_gate(cfg, trained, example, challenger, tags, served)
    # What the registered model runs per request size: the live check's expected accuracy.
    return {**decision, "served_by_batch": fastest if served else {}}
