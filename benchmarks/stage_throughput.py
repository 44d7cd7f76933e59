"""Staging throughput against a local SeaweedFS S3, beside a plain boto3 upload.

    python benchmarks/stage_throughput.py [--images 50000] [--repeats 3] [--quick]

Stages a CIFAR-sized synthetic dataset (50,000 + 10,000 images, ~180 MB) with our step,
and uploads the very same .npy bytes with a plain ``boto3 upload_file`` each, alternating
in one process; then times a repeated (no-op) staging, in-process and as a CLI run.
Prints medians and the ratio ours / plain for the upload phase. ``--quick``: every code
path in seconds on 500 images, once (the test suite's dry run; the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from flows.local.servers.seaweedfs import SeaweedFS
from steps.common.config import load_config
from steps.common.dataset import write_arrays
from steps.stage_data.cifar import synthetic_splits
from steps.stage_data.stage import parse_source, stage_dataset

REPO_ROOT = Path(__file__).resolve().parent.parent

MB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=50_000, help="training images")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a dry run: 500 images, once")
    args = parser.parse_args()
    if args.quick:
        args.images, args.repeats = 500, 1
    console = Console(stderr=True, soft_wrap=True)
    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server = SeaweedFS(tmp / "weed").start()
        try:
            os.environ.update(server.env())
            client = server.client()
            client.create_bucket(Bucket="bench")
            cfg = load_config()
            source = parse_source(f"synthetic:{args.images}")
            files_dir = tmp / "files"
            files_dir.mkdir()
            files = write_arrays(synthetic_splits(args.images, 0).arrays(), files_dir)
            total = sum(info["bytes"] for info in files.values())
            console.print(
                f"dataset: {args.images:,} + {args.images // 5:,} images, {total / MB:.1f} MB"
            )

            ours, plain, ours_step = [], [], []
            for i in range(args.repeats):
                result = stage_dataset(source, f"s3://bench/ours-{i}", cfg, quiet)
                assert not result.already_staged and result.uploaded_bytes == total
                ours.append(total / MB / result.upload_seconds)
                ours_step.append(result.seconds)
                start = time.perf_counter()
                for name in files:
                    client.upload_file(str(files_dir / name), "bench", f"plain-{i}/{name}")
                plain.append(total / MB / (time.perf_counter() - start))
                console.print(
                    f"repeat {i}: ours {ours[-1]:.1f} MB/s, plain boto3 {plain[-1]:.1f} MB/s"
                )

            noop = []
            for _ in range(args.repeats):
                result = stage_dataset(source, "s3://bench/ours-0", cfg, quiet)
                assert result.already_staged
                noop.append(result.seconds)
            cli = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "steps.stage_data", "--source", source.spec,
                     "--dest", "s3://bench/ours-0"],
                    cwd=REPO_ROOT, check=True, capture_output=True,
                )  # fmt: skip
                cli.append(time.perf_counter() - start)
        finally:
            server.stop()

    table = Table(
        title=f"Staging {total / MB:.0f} MB to SeaweedFS on 127.0.0.1 (median of {args.repeats})"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("upload, our step (MB/s)", f"{statistics.median(ours):.1f}")
    table.add_row("upload, plain boto3 upload_file (MB/s)", f"{statistics.median(plain):.1f}")
    table.add_row(
        "ratio ours / plain (of medians)",
        f"{statistics.median(ours) / statistics.median(plain):.2f}",
    )
    pairs = statistics.median(o / p for o, p in zip(ours, plain, strict=True))
    table.add_row("ratio ours / plain (median of pairs)", f"{pairs:.2f}")
    table.add_row("whole step incl. generate + hash (s)", f"{statistics.median(ours_step):.2f}")
    table.add_row("repeated staging, no-op, in process (s)", f"{statistics.median(noop):.3f}")
    table.add_row(
        "repeated staging, no-op, CLI incl. start-up (s)", f"{statistics.median(cli):.2f}"
    )
    Console(soft_wrap=True).print(table)


if __name__ == "__main__":
    main()
