"""Inference latency and throughput of every variant of the ResNet-9 default, on this machine.

    python benchmarks/inference.py [--model URI --dataset URI] [--set section.field=value ...]

Runs the optimize and benchmark steps in process (MLflow off) and prints, per variant and
batch size, p50 latency and images/s, then each variant's ratio to eager at the smallest
and largest batch size. Without ``--model`` it stages a small synthetic dataset and times
an untrained ResNet-9 (timing only: its accuracy is chance). Config overrides apply to
both steps, e.g. ``--set 'benchmark.batch_sizes=[1, 256]' --set benchmark.time_budget_s=5``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402

from steps.benchmark import step as benchmark  # noqa: E402
from steps.common.config import load_config  # noqa: E402
from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE, build_model  # noqa: E402
from steps.optimize import step as optimize  # noqa: E402
from steps.stage_data.stage import parse_source, stage_dataset  # noqa: E402


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


def table(report: dict) -> str:
    measured = {n: v for n, v in report["variants"].items() if v["status"] == "measured"}
    batches = [int(b) for b in measured["eager"]["batches"]]
    head = "| variant | " + " | ".join(f"bs {b} p50 ms / images/s" for b in batches)
    lo, hi = str(min(batches)), str(max(batches))
    lines = [
        f"{head} | vs eager bs {lo} | vs eager bs {hi} |",
        "| --- " * (len(batches) + 3) + "|",
    ]
    for name, v in measured.items():
        cells = " | ".join(
            f"{c['p50_ms']:.2f} / {c['images_per_s']:,.0f}" for c in v["batches"].values()
        )
        ratios = f"{v['batches'][lo]['speedup_vs_eager']:.2f}x | "
        ratios += f"{v['batches'][hi]['speedup_vs_eager']:.2f}x"
        lines.append(f"| {name} ({v['precision']}) | {cells} | {ratios} |")
    lines += [
        f"| {n} | {v['status']}: {v['reason']} |"
        for n, v in report["variants"].items()
        if v["status"] != "measured"
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="MODEL_URI (default: an untrained ResNet-9)")
    parser.add_argument("--dataset", help="DATASET_URI (needed with --model)")
    parser.add_argument("--width", type=int, default=64, help="untrained model's width")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    overrides = [*args.overrides, "tracking.enabled=false"]
    with tempfile.TemporaryDirectory(prefix="inference-bench-") as tmp_name:
        tmp = Path(tmp_name)
        model, dataset = args.model, args.dataset
        if model is None:
            model, dataset = untrained_model(tmp, args.width)
        common = dict(config=None, overrides=overrides, mlflow_run_id=None, debug=False)
        optimize.run(
            argparse.Namespace(
                model=model, dataset=dataset, output=str(tmp / "opt"), outputs_dir=None, **common
            )
        )
        result = benchmark.run(
            argparse.Namespace(
                model=model,
                optimized=str(tmp / "opt"),
                dataset=dataset,
                output=str(tmp / "report"),
                outputs_dir=None,
                **common,
            )
        )
    report = result["report"]
    print(
        f"\n{report['architecture']} on {report['device_name']}, torch {torch.__version__}, "
        f"load average at start {report['load_average']}\n"
    )
    print(table(report))
    print(f"\nbest variant: {report['best_variant']}")


if __name__ == "__main__":
    main()
