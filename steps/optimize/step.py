"""Optimize a trained model into variants that reload without the training code.

    python -m steps.optimize --model MODEL_URI --dataset DATASET_URI --output OPT_URI
        [--mlflow-run-id ID] [--outputs-dir DIR] [--config F] [--set k=v ...] [--debug]

Builds TorchScript, a ``torch.export`` program with a dynamic batch, an AOTInductor package,
ONNX (ONNX Runtime) and OpenVINO FP32 with their INT8 quantizations and, on CUDA with
torch-tensorrt, TensorRT FP32/FP16 and INT8 (ModelOpt; see ``steps.optimize.variants``).
Each file is reloaded and must match eager on held-out test images (the parity gate); a
variant that fails fails the step with its numbers, unless ``optimize.optional_variants``
names it.
``OPT_URI/variants.json`` is written last and lists every variant: built, skipped (with
why) or failed. Variants take normalised float NCHW input (see ``steps.common.trained_model``).
Outputs dir: ``optimized_uri`` and ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from steps.common.config import ConfigError, PipelineConfig, load_config
from steps.common.device import cpu_capability, environment, pick_device
from steps.common.optimized_variants import VARIANTS_FILE, load_variant_file, variant_files
from steps.common.step_cli import (
    add_common,
    run_main,
    step_seconds,
    tracking_wanted,
    write_outputs,
)
from steps.common.storage import open_store
from steps.common.trained_model import (
    DTYPES,
    InputError,
    TestSplit,
    TrainedModel,
    load_calibration_images,
    load_test_split,
    load_trained,
    normalize,
    run_batched,
)
from steps.optimize.gate import ParityError, build_one
from steps.optimize.variants import KINDS, NAMES, BuildContext, SkipVariant, specs

FORMAT_VERSION = 1


class OptimizeError(RuntimeError):
    """A required variant could not be built or failed its gate."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.optimize", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", required=True, help="MODEL_URI written by steps.train")
    parser.add_argument("--dataset", required=True, help="DATASET_URI (its test split)")
    parser.add_argument("--output", required=True, help="OPT_URI to write the variants under")
    add_common(parser)
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    cfg = load_config(args.config, args.overrides)
    _check_config(cfg)
    device = pick_device()
    trained = load_trained(args.model, cfg.storage, device)
    split = load_test_split(args.dataset, cfg.storage)
    store = open_store(args.output, cfg.storage)
    settings = _settings(cfg, device)
    if store.exists(VARIANTS_FILE):
        previous = json.loads(store.read_bytes(VARIANTS_FILE))
        if (
            previous.get("weights_sha256") == trained.weights_sha256
            and previous.get("settings") == settings
        ):
            print(f"Already optimized: {store.root} (same weights and settings)", file=sys.stderr)
            return _finish(args, previous, start, reused=True)

    tracked = None
    if tracking_wanted(cfg, args.mlflow_run_id):
        from steps.common.pipeline_run import open_run

        tracked = open_run(cfg.tracking, args.mlflow_run_id, run_name="optimize")
    succeeded = False
    try:
        print(f"Optimizing {trained.meta['architecture']} on {device.type}", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="optimize-") as tmp:
            workdir = Path(tmp)
            entries = build_variants(cfg, trained, split, device, workdir)
            doc = {
                "format_version": FORMAT_VERSION,
                "optimized_uri": store.root,
                "model_uri": trained.uri,
                "weights_sha256": trained.weights_sha256,
                "architecture": trained.meta["architecture"],
                "classes": trained.classes,
                "input": {
                    "layout": "NCHW",
                    "shape": [-1, *trained.meta["input_shape"]],
                    "dtype": "the variant's precision (fp32: float32)",
                    "normalised": True,
                    "mean": list(trained.mean),
                    "std": list(trained.std),
                    "note": "pixels / 255, minus mean, over std, per channel; not in the graph",
                },
                "batch_range": {
                    "min": cfg.optimize.min_batch,
                    "opt": cfg.optimize.opt_batch,
                    "max": cfg.optimize.max_batch,
                },
                "dataset_uri": split.uri,
                "dataset_digest": split.digest,
                "device": device.type,
                "environment": environment(device),
                "settings": settings,
                "variants": entries,
            }
            # An older manifest must not point at files this run replaces: drop it first.
            store.delete(VARIANTS_FILE)
            uploaded = {
                f for e in entries.values() if e["status"] == "built" for f in variant_files(e)
            }
            for name in sorted(uploaded):
                store.upload_file(workdir / name, name)
            if tracked:
                x = normalize(split.images[:8].to(device), trained.mean, trained.std)
                _log_to_mlflow(doc, workdir, x, device, cfg)
        failures = [
            e["reason"] for e in entries.values() if e["status"] == "failed" and not e["optional"]
        ]
        if failures:
            raise OptimizeError("; ".join(failures))
        # The manifest publishes the variants: written only after every file is in place.
        store.write_bytes(VARIANTS_FILE, json.dumps(doc, indent=2).encode())
        succeeded = True
    finally:
        if tracked:
            tracked.finish(succeeded)
    return _finish(args, doc, start, reused=False)


def _check_config(cfg: PipelineConfig) -> None:
    opt = cfg.optimize
    if not opt.min_batch <= opt.opt_batch <= opt.max_batch:
        raise ConfigError(
            f"optimize: need min_batch <= opt_batch <= max_batch, got {opt.min_batch}, "
            f"{opt.opt_batch}, {opt.max_batch}"
        )
    unknown = sorted(set(opt.optional_variants) - set(KINDS) - set(NAMES))
    if unknown:
        raise ConfigError(
            f"optimize.optional_variants: unknown {', '.join(unknown)}; "
            f"expected kinds {', '.join(KINDS)} or variant names"
        )


def _settings(cfg: PipelineConfig, device: torch.device) -> dict[str, Any]:
    """What the files depend on besides the weights: a rerun with the same reuses them."""
    return {**cfg.optimize.model_dump(mode="json"), "device": device.type, "isa": cpu_capability()}


def build_variants(
    cfg: PipelineConfig, trained: TrainedModel, split: TestSplit, device, workdir: Path
) -> dict[str, dict[str, Any]]:
    """Every configured variant's record; built ones lie in ``workdir``."""
    opt = cfg.optimize
    samples = max(opt.parity_samples, opt.int8_parity_samples if opt.int8 else 0)
    x = normalize(split.images[:samples].to(device), trained.mean, trained.std)
    reference = run_batched(trained.model, x, opt.max_batch)
    calibration = None
    int8_kinds = {"onnx", "openvino"} | ({"tensorrt"} if device.type == "cuda" else set())
    if opt.int8 and int8_kinds & set(opt.variants):
        pixels = load_calibration_images(split.uri, cfg.storage, opt.calibration_samples)
        calibration = normalize(pixels, trained.mean, trained.std)
    ctx = BuildContext(trained.model, device, opt, workdir, calibration)
    entries: dict[str, dict[str, Any]] = {}
    for spec in specs(opt.variants, device, opt):
        base = {"kind": spec.kind, "file": spec.file, "precision": spec.precision}
        try:
            entry = {**build_one(spec, ctx, x, reference), "status": "built"}
        except SkipVariant as exc:
            entry = {**base, "status": "skipped", "reason": str(exc)}
        except ParityError as exc:
            entry = {**exc.entry, "status": "failed", "reason": str(exc)}
        except Exception as exc:  # a compiler or exporter crash: recorded, judged below
            first = (str(exc).strip().splitlines() or [""])[0]
            entry = {**base, "status": "failed", "reason": f"{type(exc).__name__}: {first}"}
        entry["optional"] = spec.kind in opt.optional_variants or spec.name in opt.optional_variants
        entries[spec.name] = entry
        if entry["status"] == "built":
            parity = entry["parity"]
            note = f"max|diff| {parity['max_abs_diff']:.2e}, top-1 {parity['top1_agreement']:.4f}"
        else:
            note = entry["reason"]
        print(f"  {spec.name:<14} {spec.precision:<5} {entry['status']:<8} {note}", file=sys.stderr)
    return entries


def _log_to_mlflow(doc: dict[str, Any], workdir: Path, x: torch.Tensor, device, cfg) -> None:
    """Each built file as an artifact with its numbers; reloaded once from MLflow."""
    import mlflow

    metrics: dict[str, float] = {}
    for name, entry in doc["variants"].items():
        metrics[f"optimize/{name}/built"] = float(entry["status"] == "built")
        if entry.get("parity"):
            metrics[f"optimize/{name}/max_abs_diff"] = entry["parity"]["max_abs_diff"]
            metrics[f"optimize/{name}/top1_agreement"] = entry["parity"]["top1_agreement"]
        if entry["status"] == "built":
            metrics[f"optimize/{name}/size_mb"] = entry["size_bytes"] / 2**20
            metrics[f"optimize/{name}/build_s"] = entry["build_seconds"]
            for file in variant_files(entry):
                mlflow.log_artifact(str(workdir / file), artifact_path="optimized")
    mlflow.log_metrics(metrics, step=0)
    mlflow.log_dict(doc, f"optimized/{VARIANTS_FILE}")
    env = doc["environment"]
    mlflow.set_tags({f"optimize.env.{k}": str(v) for k, v in env.items()})
    mlflow.set_tag("optimize.optimized_uri", doc["optimized_uri"])
    run_id = mlflow.active_run().info.run_id
    with tempfile.TemporaryDirectory(prefix="reload-") as tmp:
        for name, entry in doc["variants"].items():
            if entry["status"] != "built":
                continue
            local = {
                file: mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=f"optimized/{file}", dst_path=tmp
                )
                for file in variant_files(entry)
            }
            runner = load_variant_file(entry, Path(local[entry["file"]]), device)
            with torch.inference_mode():
                runner(x[: cfg.optimize.min_batch].to(DTYPES[entry["precision"]]))
            print(f"  {name}: reloaded from MLflow", file=sys.stderr)


def _finish(args, doc: dict[str, Any], start: float, reused: bool) -> dict[str, Any]:
    summary = {
        **step_seconds(start),
        "optimized_uri": doc["optimized_uri"],
        "device": doc["device"],
        "reused": reused,
        "variants": {
            name: {
                **{k: e.get(k) for k in ("status", "precision", "size_bytes", "reason")},
                **{k: (e.get("parity") or {}).get(k) for k in ("max_abs_diff", "top1_agreement")},
            }
            for name, e in doc["variants"].items()
        },
    }
    write_outputs(
        args.outputs_dir, {"optimized_uri": doc["optimized_uri"], "summary.json": summary}
    )
    print(doc["optimized_uri"])
    return {**summary, "doc": doc}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main("optimize", run, args, user_errors=(InputError,))
