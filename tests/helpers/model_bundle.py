"""What the optimize, benchmark, predict and serving tests build their models with: a
staged synthetic dataset, small models "trained" in a few SGD steps and saved as the
training step saves them, and the arguments of the optimize and benchmark steps. The one
optimized set they share (TorchScript, export, AOTInductor, ...; an AOTInductor compile
takes tens of seconds on two cores) is tests/conftest.py's session fixture ``bundle``."""

from __future__ import annotations

import argparse
import importlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console

from steps.common.config import PipelineConfig
from steps.common.device import cpu_bf16_features
from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE, build_model
from steps.common.trained_model import load_test_split, normalize
from steps.optimize import step as optimize
from steps.optimize.optimize_model import OptimizeResult
from steps.stage_data.cifar import synthetic_splits
from steps.stage_data.stage import parse_source, stage_dataset

WIDTH = 8  # a ResNet-9 of 100k parameters: seconds to train, fast to compile
BF16_CPU = bool(cpu_bf16_features())  # AMX / AVX512-BF16: aoti_bf16 is built too
CPU_VARIANTS = ["torchscript", "export", "aoti", *(["aoti_bf16"] if BF16_CPU else [])]
# ONNX Runtime and OpenVINO, FP32 and INT8 (INT8 passes its agreement gate on this model).
PORTABLE_VARIANTS = ["onnx", "onnx_int8", "openvino", "openvino_int8"]
FASTEST = "openvino_int8"  # what predict picks first on a CPU (optimized_variants.PREFERENCE)
FAST = [
    "benchmark.batch_sizes=[1, 4, 16]",
    "benchmark.warmup_iters=1",
    "benchmark.warmup_s=0",
    "benchmark.min_iters=3",
    "benchmark.time_budget_s=0.05",
    "optimize.parity_samples=64",
    "optimize.opt_batch=8",
    "optimize.max_batch=32",
]


@dataclass
class Bundle:
    root: Path
    dataset_uri: str
    model_uri: str
    optimized_uri: str
    optimize_result: OptimizeResult


class InProcessWorker:
    """``steps.common.isolation.Worker``'s stand-in for a test that patches what a build
    process would load (a runtime made missing): the set-up and the jobs run in the test's
    own process, where the patch holds. Only for tests about what a builder records, never
    about the process boundary (tests/test_isolation.py)."""

    def __init__(self, setup, scratch, *, setup_arg=None, **options) -> None:
        self.setup, self.setup_arg, self.state, self.started = setup, setup_arg, None, 0

    def __enter__(self) -> InProcessWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def start(self) -> None:
        pass

    def run(self, job, arg, limit_s: float, what: str):
        if not self.started:
            self.state, self.started = _function(self.setup)(self.setup_arg), 1
        return _function(job)(self.state, arg)


def _function(named):
    """``module:function`` imported, as the Worker's child does."""
    if callable(named):
        return named
    module, _, name = named.partition(":")
    return getattr(importlib.import_module(module), name)


def stage_synthetic(root: Path, size: int = 600) -> str:
    quiet = Console(file=io.StringIO())
    result = stage_dataset(parse_source(f"synthetic:{size}"), str(root), PipelineConfig(), quiet)
    return result.dataset_uri


def train_tiny(
    dataset_uri: str, dest: Path, steps: int = 80, seed: int = 0, arch: str = "resnet9"
) -> str:
    """A few SGD steps on the staged training split; weights.pt + model.json as steps.train."""
    torch.manual_seed(seed)
    splits = synthetic_splits(600, 0)
    images = torch.from_numpy(splits.train_images).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(splits.train_labels)
    x_all = normalize(images, CIFAR10_MEAN, CIFAR10_STD)
    model = build_model(arch, 10, WIDTH)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        index = torch.randint(0, len(x_all), (64,), generator=generator)
        loss = torch.nn.functional.cross_entropy(model(x_all[index]), labels[index])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return save_model(model, dataset_uri, dest, arch)


def save_model(model: torch.nn.Module, dataset_uri: str, dest: Path, arch: str = "resnet9") -> str:
    test = load_test_split(dataset_uri, PipelineConfig().storage)
    with torch.no_grad():
        logits = model(normalize(test.images, CIFAR10_MEAN, CIFAR10_STD))
    accuracy = (logits.argmax(1) == test.labels).float().mean().item()
    dest.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    (dest / "weights.pt").write_bytes(buffer.getvalue())
    meta = {
        "architecture": arch,
        "num_classes": 10,
        "classes": list(synthetic_splits(10, 0).classes),
        "mean": list(CIFAR10_MEAN),
        "std": list(CIFAR10_STD),
        "input_shape": list(INPUT_SHAPE),
        "dataset_uri": dataset_uri,
        "dataset_digest": test.digest,
        "test_accuracy": accuracy,
        "epochs": 1,
        "width": WIDTH,
    }
    (dest / "model.json").write_text(json.dumps(meta, indent=2))
    return dest.as_uri()


def optimize_args(model_uri: str, dataset_uri: str, output: Path, *overrides: str, **kw):
    return argparse.Namespace(
        model=model_uri,
        dataset=dataset_uri,
        output=str(output),  # a path or a URI
        config=None,
        overrides=[*FAST, *overrides],
        mlflow_run_id=kw.get("run_id"),
        outputs_dir=kw.get("outputs_dir"),
        debug=False,
    )


def build_bundle(root: Path) -> Bundle:
    """A dataset, a trained model and its optimized variants under ``root``."""
    dataset_uri = stage_synthetic(root / "store")
    model_uri = train_tiny(dataset_uri, root / "model")
    out = root / "outputs"
    result = optimize.run(optimize_args(model_uri, dataset_uri, root / "opt", outputs_dir=out))
    return Bundle(root, dataset_uri, model_uri, (root / "opt").as_uri(), result)


def bench_args(model: str, optimized: str, dataset: str, output: Path, *overrides: str, **kw):
    return argparse.Namespace(
        model=model,
        optimized=optimized,
        dataset=dataset,
        output=str(output),
        config=None,
        overrides=[*FAST, *overrides],
        mlflow_run_id=None,
        outputs_dir=kw.get("outputs_dir"),
        debug=False,
    )


def champion_args(bundle: Bundle, report: Path, registered_model: str, **kw):
    """``bench_args`` of a benchmark that registers ``bundle``'s serving pyfunc as
    ``registered_model`` (alias champion, one round): a champion for the serving tests."""
    return bench_args(
        bundle.model_uri,
        bundle.optimized_uri,
        bundle.dataset_uri,
        report,
        f"benchmark.registered_model={registered_model}",
        "benchmark.rounds=1",
        **kw,
    )
