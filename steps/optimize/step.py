"""Optimize a trained model into variants that reload without the training code.

    python -m steps.optimize --model MODEL_URI --dataset DATASET_URI --output OPT_URI
        [--mlflow-run-id ID] [--outputs-dir DIR] [--config F] [--set k=v ...] [--debug]

Builds TorchScript, a ``torch.export`` program with a dynamic batch, an AOTInductor package,
ONNX (ONNX Runtime) and OpenVINO FP32 with their INT8 quantizations and, on CUDA with
torch-tensorrt, TensorRT FP32/FP16 and INT8 (ModelOpt; see ``steps.optimize.variants``),
and any ``optimize.extra_variants``. Each variant is built in a build process of its own
making (``steps.optimize.isolated``): a builder that crashes, aborts, hangs past
``optimize.build_timeout_s`` or raises costs that variant only. Each file is reloaded and
must match eager on held-out test images (the parity gate); a variant that fails fails the
step with its numbers, unless ``optimize.optional_variants`` names it.
``OPT_URI/variants.json`` (``steps.common.contracts.variants``) is written last and lists
every variant: built, skipped (with why) or failed (with why: the gate's numbers, or the
signal or limit and where it crashed). Variants take normalised float NCHW input (see
``steps.common.trained_model``). Outputs dir: ``optimized_uri`` and ``summary.json``.
"""

from __future__ import annotations

import argparse

from steps.common.config import load_config
from steps.common.step_cli import add_common, run_main, write_outputs
from steps.common.trained_model import InputError
from steps.optimize.optimize_model import OptimizeError, OptimizeResult, optimize_model

__all__ = ["OptimizeError", "build_parser", "main", "run"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.optimize", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", required=True, help="MODEL_URI written by steps.train")
    parser.add_argument("--dataset", required=True, help="DATASET_URI (its test split)")
    parser.add_argument("--output", required=True, help="OPT_URI to write the variants under")
    add_common(parser)
    return parser


def run(args: argparse.Namespace) -> OptimizeResult:
    cfg = load_config(args.config, args.overrides)
    result = optimize_model(cfg, args.model, args.dataset, args.output, args.mlflow_run_id)
    outputs = {"optimized_uri": result.optimized_uri, "summary.json": result.summary()}
    write_outputs(args.outputs_dir, outputs)
    print(result.optimized_uri)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main("optimize", run, args, user_errors=(InputError,))
