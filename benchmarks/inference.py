"""Inference latency of every shipped variant beside its peers, on this machine.

    python benchmarks/inference.py [--model URI --dataset URI] [--threads 2]
        [--set section.field=value ...] [--quick]

Runs the optimize step in process (MLflow off), then times eager, every shipped variant
and two peers on the same ONNX file as a user would run them (plain ONNX Runtime with
default session options, plain OpenVINO with a default compile), all in the benchmark
step's alternating rounds (``benchmark.rounds``; p50 is the median over the rounds'
calls) at batch 1/8/64/256. Prints each one's top-1 agreement with eager on the test split,
p50, and its ratio to eager and to the best peer; then ``openvino_int8`` against OpenVINO's
default compile of the same ONNX file (BF16 where the CPU has BF16 units: AVX512-BF16 or
AMX) at batch 1 and 256, as it runs in the benchmark (normalised float32 in) and as the
served pyfunc runs it (``openvino_int8_served``: the uint8 pixels in, the cast,
normalisation and transpose compiled into its graph, ``steps.common.serving.runners``).
Without ``--model`` it stages a synthetic dataset and trains a ResNet-9 for
``--train-steps`` SGD steps (enough for its logits to carry signal; its accuracy is not the
point). Overrides apply to optimize and benchmark, e.g. ``--set benchmark.time_budget_s=5``.
``--quick``: a dry run in seconds (``QUICK``), the test suite's.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
from pathlib import Path

import torch
from rich.console import Console

from steps.benchmark import measure as benchmark
from steps.common.config import load_config
from steps.common.dataset import read_manifest, read_split
from steps.common.device import device_name
from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE, build_model
from steps.common.optimized_variants import TorchAdapter, open_optimized
from steps.common.storage import open_store
from steps.common.trained_model import (
    load_test_split,
    load_trained,
    normalize,
    run_batched,
)
from steps.optimize import step as optimize
from steps.stage_data.stage import parse_source, stage_dataset

# --quick: every code path (a variant built and gated, the peers, the alternating rounds, the
# table) in seconds on a ResNet-9 of width 8 trained one step; the numbers mean nothing.
QUICK = [
    "optimize.variants=[onnx]",
    "optimize.int8=false",
    "benchmark.batch_sizes=[1, 8]",
    "benchmark.warmup_iters=1",
    "benchmark.warmup_s=0.01",
    "benchmark.min_iters=2",
    "benchmark.time_budget_s=0.02",
    "benchmark.rounds=1",
]


def untrained_model(tmp: Path, width: int) -> tuple[str, str]:
    cfg = load_config()
    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115
    dataset = stage_dataset(parse_source("synthetic:2000"), str(tmp / "store"), cfg, quiet)
    model = build_model("resnet9", 10, width).eval()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    (tmp / "model").mkdir()
    (tmp / "model" / "weights.pt").write_bytes(buffer.getvalue())
    meta = {
        "architecture": "resnet9",
        "num_classes": 10,
        "classes": [str(i) for i in range(10)],
        "mean": list(CIFAR10_MEAN),
        "std": list(CIFAR10_STD),
        "input_shape": list(INPUT_SHAPE),
        "width": width,
    }
    (tmp / "model" / "model.json").write_text(json.dumps(meta))
    return (tmp / "model").as_uri(), dataset.dataset_uri


def trained_briefly(model_uri: str, dataset_uri: str, steps: int) -> None:
    """A few SGD steps on the staged training split, so logits carry signal and INT8's
    top-1 agreement means something (an untrained net's argmax is nearly constant)."""
    if steps <= 0:
        return
    cfg = load_config()
    store = open_store(dataset_uri, cfg.storage)
    images, labels = read_split(store, read_manifest(store), "train")
    x_all = normalize(torch.from_numpy(images).permute(0, 3, 1, 2), CIFAR10_MEAN, CIFAR10_STD)
    y_all = torch.from_numpy(labels)
    path = Path(model_uri.removeprefix("file://")) / "weights.pt"
    meta = json.loads(path.with_name("model.json").read_text())
    model = build_model("resnet9", 10, meta["width"])
    model.load_state_dict(torch.load(path))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        index = torch.randint(0, len(x_all), (64,), generator=generator)
        loss = torch.nn.functional.cross_entropy(model(x_all[index]), y_all[index])
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(model.eval().state_dict(), path)


def peers(onnx_file: Path) -> dict:
    """``{name: (precision, runner)}``: ONNX Runtime and OpenVINO on the ONNX file as a user
    runs them (default session options, default compile), and OpenVINO held to FP32. On a
    CPU with AVX512-BF16 or AMX OpenVINO's default compile runs BF16, not FP32: its
    precision is read back from the compiled model and shown."""
    import onnxruntime as ort
    import openvino as ov

    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    core = ov.Core()
    default = core.compile_model(str(onnx_file), "CPU")
    f32 = core.compile_model(str(onnx_file), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    requests = {"default": default.create_infer_request(), "f32": f32.create_infer_request()}
    precision = default.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # bf16, f32
    return {
        "peer_onnxruntime": ("fp32", TorchAdapter(lambda x: session.run(None, {name: x})[0])),
        "peer_openvino": (
            ("fp32" if precision == "f32" else precision) + ", default",
            TorchAdapter(lambda x: requests["default"].infer([x])[0].copy()),
        ),
        "peer_openvino_f32": (
            "fp32",
            TorchAdapter(lambda x: requests["f32"].infer([x])[0].copy()),
        ),
    }


def served_pixels(doc, opt_dir: Path, trained, threads: int) -> tuple | None:
    """``(precision, runner, prepare)`` of ``openvino_int8`` as the served pyfunc loads it:
    uint8 N x 32 x 32 x 3 in; ``prepare`` turns the benchmark's normalised images back into
    those pixels (exactly: they were made from them)."""
    from steps.common.serving.runners import load_runner

    entry = doc.variants.get("openvino_int8")  # variants.json (VariantsManifest)
    if entry is None or not entry.built:
        return None
    pixels = (list(trained.mean), list(trained.std))
    runner = load_runner("openvino", opt_dir / entry.file, entry.details, threads, pixels)
    mean = torch.tensor(trained.mean).view(1, 3, 1, 1)
    std = torch.tensor(trained.std).view(1, 3, 1, 1)

    def prepare(x: torch.Tensor) -> torch.Tensor:
        values = ((x * std + mean) * 255).round().clamp(0, 255).to(torch.uint8)
        return values.permute(0, 2, 3, 1).contiguous()

    return "int8", lambda x: torch.from_numpy(runner(x.numpy())), prepare


def default_compile_ratios(results: dict) -> list[str]:
    """``openvino_int8`` (and its served form) against OpenVINO's default compile, at the
    smallest and the largest batch both measured. ``results``: ``{name: Measured}``."""
    lines = []
    peer = results.get("peer_openvino")
    for name in ("openvino_int8", "openvino_int8_served"):
        if name not in results or peer is None:
            continue
        shared = sorted(set(results[name].batches) & set(peer.batches))
        cells = []
        for batch in dict.fromkeys(shared[:1] + shared[-1:]):
            mine, theirs = results[name].batches[batch].p50_ms, peer.batches[batch].p50_ms
            cells.append(f"batch {batch}: {theirs / mine:.2f}x ({mine:.3f} vs {theirs:.3f} ms)")
        lines.append(f"{name} vs OpenVINO's default compile ({peer.precision}): "
                     + "; ".join(cells))  # fmt: skip
    return lines


def table(results: dict, agreement: dict, skipped: dict) -> str:
    """``results``: ``{name: Measured}``, ``skipped``: ``{name: NotMeasured}``
    (steps.common.contracts.benchmark)."""
    batches = list(results["eager"].batches)
    peer_names = [n for n in results if n.startswith("peer_")]
    head = " | ".join(f"bs {b} p50 ms" for b in batches)
    lines = [
        f"| variant | top-1 agr. | {head} | "
        + " | ".join(f"bs {b} vs eager / vs best peer / vs best FP32 peer" for b in batches)
        + " |",
        "| --- " * (2 + 2 * len(batches)) + "|",
        # "best peer": any peer, OpenVINO's default (BF16 on BF16-capable CPUs) included
    ]
    for name, v in results.items():
        cells = " | ".join(f"{v.batches[b].p50_ms:.3f}" for b in batches)
        ratios = []
        for b in batches:
            best_peer = min(results[p].batches[b].p50_ms for p in peer_names)
            best_fp32 = min(
                results[p].batches[b].p50_ms for p in peer_names if results[p].precision == "fp32"
            )
            mine = v.batches[b].p50_ms
            ratios.append(
                f"{v.batches[b].speedup_vs_eager:.2f}x / {best_peer / mine:.2f}x / "
                f"{best_fp32 / mine:.2f}x"
            )
        label = f"{name} ({v.precision})"
        lines.append(f"| {label} | {agreement[name]:.4f} | {cells} | {' | '.join(ratios)} |")
    lines += [f"| {n} | {v.status}: {v.reason} |" for n, v in skipped.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="MODEL_URI (default: a briefly trained ResNet-9)")
    parser.add_argument("--dataset", help="DATASET_URI (needed with --model)")
    parser.add_argument("--width", type=int, default=64, help="default model's width")
    parser.add_argument("--train-steps", type=int, default=60, help="default model's SGD steps")
    parser.add_argument("--threads", type=int, default=2, help="torch, ORT, OpenVINO threads")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--quick", action="store_true", help="a dry run: " + ", ".join(QUICK))
    args = parser.parse_args()
    if args.quick:
        args.width, args.train_steps = 8, 1
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    torch.set_num_threads(args.threads)
    overrides = [
        "benchmark.batch_sizes=[1, 8, 64, 256]",
        f"optimize.cpu_threads={args.threads}",
        *(QUICK if args.quick else []),
        *args.overrides,
        "tracking.enabled=false",
    ]
    cfg = load_config(None, overrides)
    device = torch.device("cpu")
    with tempfile.TemporaryDirectory(prefix="inference-bench-") as tmp_name:
        tmp = Path(tmp_name)
        model, dataset = args.model, args.dataset
        if model is None:
            model, dataset = untrained_model(tmp, args.width)
            trained_briefly(model, dataset, args.train_steps)
        common = dict(config=None, overrides=overrides, mlflow_run_id=None, debug=False)
        opt_uri = str(tmp / "opt")
        optimize.run(
            argparse.Namespace(
                model=model, dataset=dataset, output=opt_uri, outputs_dir=None, **common
            )
        )
        trained = load_trained(model, cfg.storage, device)
        doc = open_optimized(opt_uri, trained, cfg.storage)
        split = load_test_split(dataset, cfg.storage)
        images = normalize(split.images, trained.mean, trained.std)
        (tmp / "load").mkdir()
        runners, skipped = benchmark.collect(cfg, trained, doc, opt_uri, device, tmp / "load")
        served = served_pixels(doc, tmp / "opt", trained, args.threads)
        if served is not None:
            runners["openvino_int8_served"] = served
        for name, (precision, runner) in peers(tmp / "opt" / "model.onnx").items():
            runners[name] = (precision, runner, lambda x: x)
        reference = run_batched(trained.model, images, 256).argmax(1)
        agreement = {
            name: (run_batched(r, prep(images), 256, 1).argmax(1) == reference)
            .float()
            .mean()
            .item()
            for name, (_, r, prep) in runners.items()
        }
        results = benchmark.measure_all(cfg, runners, images, split.labels, 256, 1)
    print(
        f"\n{trained.meta['architecture']} width {trained.meta.get('width')} on "
        f"{device_name(device)}, torch {torch.__version__}, {args.threads} threads, "
        f"{len(images)} test images, {cfg.benchmark.rounds} alternating rounds, "
        f"load average {[round(v, 2) for v in os.getloadavg()]}\n"
    )
    print(table(results, agreement, skipped))
    print("\n" + "\n".join(default_compile_ratios(results)))


if __name__ == "__main__":
    main()
