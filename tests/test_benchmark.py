"""steps.benchmark: every variant x batch size with sane numbers, the report and its plot,
and the registry gate against a real MLflow server (promote the better, keep the worse out)."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from steps.benchmark import step as benchmark
from steps.benchmark.report import plot_figure
from steps.common.config import ConfigError
from steps.common.models import build_model
from steps.common.trained_model import InputError
from steps.optimize import step as optimize
from tests.helpers.model_bundle import (
    CPU_VARIANTS,
    FAST,
    PORTABLE_VARIANTS,
    WIDTH,
    Bundle,
    bench_args,
    optimize_args,
    save_model,
)
from tests.helpers.paths import REPO_ROOT

VARIANTS = ["eager", *CPU_VARIANTS, *PORTABLE_VARIANTS]
BATCHES = [1, 4, 16]


@pytest.fixture(scope="module")
def result(bundle: Bundle, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("bench")
    args = bench_args(
        bundle.model_uri,
        bundle.optimized_uri,
        bundle.dataset_uri,
        root / "report",
        outputs_dir=root / "outputs",
    )
    out = benchmark.run(args)  # "report": the typed report; "doc": benchmark.json as published
    return {
        "root": root,
        "report": out.report,
        "doc": json.loads((root / "report" / "benchmark.json").read_text()),
    }


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_and_batch_has_sane_numbers(result: dict, name: str, batch: int) -> None:
    variant = result["doc"]["variants"][name]
    assert variant["status"] == "measured"
    assert variant["accuracy"] > 0.5  # the tiny model learns the synthetic classes
    cell = variant["batches"][str(batch)]
    assert cell["iters"] >= 3
    assert (
        0 < cell["min_ms"] <= cell["p50_ms"] <= cell["p90_ms"] <= cell["p99_ms"] <= cell["max_ms"]
    )
    assert cell["images_per_s"] == pytest.approx(batch * 1000 / cell["p50_ms"])
    assert cell["peak_mem_mb"] >= 0
    eager = result["doc"]["variants"]["eager"]["batches"][str(batch)]
    assert cell["speedup_vs_eager"] == pytest.approx(eager["p50_ms"] / cell["p50_ms"])


@pytest.mark.parametrize("name", ["tensorrt_fp32", "tensorrt_fp16"])
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU TensorRT may be measured")
def test_tensorrt_listed_as_skipped_with_the_reason(result: dict, name: str) -> None:
    variant = result["doc"]["variants"][name]
    assert variant["status"] == "skipped"
    assert "no CUDA device" in variant["reason"]
    assert (
        f"- {name}: skipped: no CUDA device"
        in (result["root"] / "report" / "report.md").read_text()
    )


def test_plot_is_a_png(result: dict) -> None:
    data = (result["root"] / "report" / "benchmark.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 300
    assert len(data) > 20_000


def test_plot_ticks_are_plain_numbers_and_the_measured_batches(result: dict) -> None:
    fig = plot_figure(result["report"])
    fig.canvas.draw()
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == [str(b) for b in BATCHES]
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels and all(re.fullmatch(r"[\d,]+(\.\d+)?", t) for t in labels), labels
    labels = {line.get_label() for line in fig.axes[1].get_lines()}
    assert labels == {f"{n} ({result['doc']['variants'][n]['precision']})" for n in VARIANTS}


def test_fastest_variant_per_batch_is_recorded(result: dict) -> None:
    report = result["doc"]
    fastest = report["fastest_by_batch"]
    assert list(fastest) == [str(b) for b in BATCHES]
    for batch, name in fastest.items():
        p50 = {
            n: v["batches"][batch]["p50_ms"]
            for n, v in report["variants"].items()
            if "batches" in v
        }
        assert p50[name] == min(p50.values())  # every variant here is within the margin
    assert fastest[str(report["gate_batch"])] == report["best_variant"]


def test_report_outputs_and_summary(result: dict) -> None:
    report_dir, outputs = result["root"] / "report", result["root"] / "outputs"
    assert (outputs / "benchmark.json").read_bytes() == (report_dir / "benchmark.json").read_bytes()
    markdown = (outputs / "report.md").read_text()
    assert markdown == (report_dir / "report.md").read_text()
    for name in VARIANTS:
        precision = result["doc"]["variants"][name]["precision"]
        for batch in BATCHES:
            assert f"| {name} | {precision} | {batch} |" in markdown
    summary = json.loads((outputs / "summary.json").read_text())
    assert summary["seconds"] > 0
    assert summary["best_variant"] in VARIANTS
    assert summary["promoted"] is False  # no tracking: nothing registered
    assert "MLflow tracking off" in markdown


def test_variants_of_another_model_are_refused(bundle: Bundle, tmp_path: Path) -> None:
    other = save_model(build_model("resnet9", 10, WIDTH).eval(), bundle.dataset_uri, tmp_path / "m")
    args = bench_args(other, bundle.optimized_uri, bundle.dataset_uri, tmp_path / "r")
    with pytest.raises(InputError, match=r"was optimized from .*, not from .* \(weights differ\)"):
        benchmark.run(args)


def test_batch_outside_the_dynamic_range_is_a_config_error(bundle: Bundle, tmp_path: Path) -> None:
    args = bench_args(
        bundle.model_uri,
        bundle.optimized_uri,
        bundle.dataset_uri,
        tmp_path,
        "benchmark.batch_sizes=[1, 64]",
    )
    with pytest.raises(
        ConfigError, match=r"batch_sizes: \[64\] outside the variants' batch range 1\.\.32"
    ):
        benchmark.run(args)


@pytest.mark.parametrize(
    ("sets", "code", "stderr"),
    [
        ([], 0, r"aoti +bs 16 +p50"),
        (["benchmark.batch_sizes=[512]"], 2, r"^benchmark: error: benchmark\.batch_sizes: \[512\]"),
    ],
    ids=["ok", "outside-range"],
)
def test_cli(bundle: Bundle, tmp_path: Path, sets: list[str], code: int, stderr: str) -> None:
    command = [sys.executable, "-m", "steps.benchmark", "--model", bundle.model_uri]
    command += ["--optimized", bundle.optimized_uri, "--dataset", bundle.dataset_uri]
    command += ["--output", str(tmp_path / "r"), "--outputs-dir", str(tmp_path / "o")]
    for item in [*FAST, *sets]:
        command += ["--set", item]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == code, done.stderr
    assert re.search(stderr, done.stderr, re.M)
    assert "Traceback" not in done.stderr
    if code == 0:
        assert done.stdout.strip() == (tmp_path / "r").as_uri()
        assert json.loads((tmp_path / "o" / "summary.json").read_text())["seconds"] > 0


def test_variants_and_report_in_s3(bundle: Bundle, s3_bucket, tmp_path: Path) -> None:
    """On a cluster OPT_URI and REPORT_URI are S3 prefixes: write, fetch and publish there."""
    opt, report = f"{s3_bucket.uri}/run-1/optimized", f"{s3_bucket.uri}/run-1/benchmark"
    optimize.run(optimize_args(bundle.model_uri, bundle.dataset_uri, opt, *S3_SETS))
    args = bench_args(bundle.model_uri, opt, bundle.dataset_uri, report, *S3_SETS)
    args.output = report
    result = benchmark.run(args)
    assert "torchscript" in result.report.measured
    client = s3_bucket.server.client()
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket.name)["Contents"]}
    assert {
        "run-1/optimized/torchscript.pt",
        "run-1/optimized/variants.json",
        "run-1/benchmark/benchmark.json",
        "run-1/benchmark/report.md",
        "run-1/benchmark/benchmark.png",
    } <= keys


S3_SETS = ["optimize.variants=[torchscript]", "tracking.enabled=false", "benchmark.rounds=1"]
