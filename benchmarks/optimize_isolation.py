"""What building each optimize variant in a build process costs (issue 42): the optimize
step's wall time on the smoke config, one build process shared by the variants (the
default, ``optimize.variants_per_process`` null) against a process per variant (1), and
with ``--baseline-tree`` the same step of an earlier checkout (one that built every
variant in the step's own process).

    python benchmarks/optimize_isolation.py [--rounds 3] [--baseline-tree DIR]
        [--set section.field=value ...] [--quick]

Stages ``synthetic:2000`` and saves an untrained SimpleCNN (the smoke config's model; the
numbers measured here are the processes' and the builds', not the model's accuracy). Each
round runs every configuration once, in turn (``python -m steps.optimize --config
configs/smoke.yaml``, MLflow off, a fresh output each time), so load from other processes
falls on all alike; prints each one's median wall seconds, its ratio to the first row and
the build processes it started. ``--quick``: one round of TorchScript alone, the test
suite's dry run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console

from steps.common.config import load_config
from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE, build_model
from steps.stage_data.stage import parse_source, stage_dataset

REPO_ROOT = Path(__file__).resolve().parent.parent

CONFIG = REPO_ROOT / "configs" / "smoke.yaml"
MODES = {"one build process (default)": [], "a process per variant": ["1"]}
QUICK = ["optimize.variants=[torchscript]"]


def untrained(tmp: Path) -> tuple[str, str]:
    """A staged synthetic dataset and an untrained SimpleCNN saved as steps.train saves."""
    quiet = Console(file=io.StringIO())
    dataset = stage_dataset(
        parse_source("synthetic:2000"), str(tmp / "store"), load_config(), quiet
    )
    model = build_model("simplecnn", 10, 64).eval()
    (tmp / "model").mkdir()
    torch.save(model.state_dict(), tmp / "model" / "weights.pt")
    meta = {
        "architecture": "simplecnn", "num_classes": 10, "classes": [str(i) for i in range(10)],
        "mean": list(CIFAR10_MEAN), "std": list(CIFAR10_STD), "input_shape": list(INPUT_SHAPE),
        "width": 64,
    }  # fmt: skip
    (tmp / "model" / "model.json").write_text(json.dumps(meta))
    return (tmp / "model").as_uri(), dataset.dataset_uri


def optimize_once(tree: Path, model: str, dataset: str, out: Path, sets: list[str]) -> tuple:
    """Seconds of one ``python -m steps.optimize`` in ``tree``, and the processes it started."""
    command = [sys.executable, "-m", "steps.optimize", "--config", str(CONFIG)]
    command += ["--model", model, "--dataset", dataset, "--output", str(out)]
    command += [arg for item in sets for arg in ("--set", item)]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = str(tree)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"optimize_isolation.py: {tree} failed: {done.stderr.strip().splitlines()[-1]}")
    found = re.search(r"\((\d+) build process\(es\) started\)", done.stderr)
    return seconds, int(found.group(1)) if found else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, in turns")
    parser.add_argument("--baseline-tree", type=Path, help="an earlier checkout to compare")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--quick", action="store_true", help="one round, TorchScript alone")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    common = [*(QUICK if args.quick else []), *args.overrides]
    rows = {
        name: (REPO_ROOT, [*common, *(f"optimize.variants_per_process={v}" for v in value)])
        for name, value in MODES.items()
    }
    if args.baseline_tree:
        rows = {
            f"in the step's process ({args.baseline_tree})": (args.baseline_tree, common),
            **rows,
        }
    times: dict[str, list[float]] = {name: [] for name in rows}
    spawned: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="optimize-isolation-") as tmp_name:
        tmp = Path(tmp_name)
        model, dataset = untrained(tmp)
        for turn in range(rounds):
            for index, (name, (tree, sets)) in enumerate(rows.items()):
                out = tmp / f"opt-{turn}-{index}"
                seconds, processes = optimize_once(tree, model, dataset, out, sets)
                times[name].append(seconds)
                spawned[name] = processes
    load = [round(v, 2) for v in os.getloadavg()]
    print(f"\noptimize step on {CONFIG.name}{' (quick)' if args.quick else ''}, {rounds} "
          f"round(s), torch {torch.__version__}, {os.cpu_count()} CPUs, load {load}\n")  # fmt: skip
    first = statistics.median(next(iter(times.values())))
    print("| how the variants are built | median wall s | vs first row | build processes |")
    print("| --- | ---: | ---: | ---: |")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.1f} | {median / first:.2f}x | {spawned[name]} |")


if __name__ == "__main__":
    main()
