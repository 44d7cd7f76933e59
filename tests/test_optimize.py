"""steps.optimize: TorchScript, export and AOTInductor of a small trained model pass the
parity gate; a perturbed variant fails it with its numbers; TensorRT is skipped with the
reason on a CPU; MLflow gets each file, its numbers, and reloads it."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import mlflow
import pytest
import torch
from torch._inductor.package import load_package

from steps.common.config import ConfigError, OptimizeConfig, load_config
from steps.common.contracts.variants import VariantEntry
from steps.common.device import cpu_capability
from steps.common.optimized_variants import (
    LARGE_BATCH_PROGRAM,
    SMALL_BATCH_PROGRAM,
    BatchSizeDispatch,
    load_variant_file,
)
from steps.common.trained_model import InputError
from steps.optimize import builders, variants
from steps.optimize import step as optimize
from steps.optimize.builders import SMALL_BATCH_PROBE_LIMIT
from tests.helpers.faulty_builders import extra
from tests.helpers.model_bundle import (
    BF16_CPU,
    CPU_VARIANTS,
    Bundle,
    optimize_args,
)
from tests.helpers.paths import REPO_ROOT

HAS_TENSORRT = torch.cuda.is_available() and importlib.util.find_spec("torch_tensorrt") is not None
HAS_MODELOPT = importlib.util.find_spec("modelopt") is not None  # TensorRT INT8 (ModelOpt PTQ)


def _doc(b: Bundle) -> dict:
    return json.loads((b.root / "opt" / "variants.json").read_text())


@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_cpu_variants_pass_parity_and_reload(bundle: Bundle, name: str) -> None:
    entry = _doc(bundle)["variants"][name]
    assert entry["status"] == "built"
    assert entry["precision"] == ("bf16" if name == "aoti_bf16" else "fp32")
    assert entry["parity"]["passed"]
    assert entry["parity"]["max_abs_diff"] <= (5e-2 if name == "aoti_bf16" else 1e-3)
    assert entry["parity"]["top1_agreement"] == 1.0
    path = bundle.root / "opt" / entry["file"]
    assert path.stat().st_size == entry["size_bytes"] > 10_000


@pytest.mark.skipif(BF16_CPU, reason="this CPU has BF16 units: aoti_bf16 is built")
def test_aoti_bf16_skipped_with_reason_on_cpus_without_bf16(bundle: Bundle) -> None:
    entry = _doc(bundle)["variants"]["aoti_bf16"]
    assert entry["status"] == "skipped"
    assert "no native BF16" in entry["reason"]


@pytest.mark.parametrize("name", ["tensorrt_fp32", "tensorrt_fp16", "tensorrt_int8"])
@pytest.mark.skipif(HAS_TENSORRT, reason="CUDA and torch-tensorrt present: TensorRT is built")
def test_tensorrt_recorded_as_skipped_with_reason(bundle: Bundle, name: str) -> None:
    entry = _doc(bundle)["variants"][name]
    assert entry["status"] == "skipped"
    assert entry["optional"]
    expected = "no CUDA device" if not torch.cuda.is_available() else "torch-tensorrt"
    assert expected in entry["reason"]
    if name == "tensorrt_int8" and not HAS_MODELOPT:  # every absence named, not the first
        assert entry["reason"].endswith(
            "nvidia-modelopt is not installed (pip install 'cifar-pipeline[tensorrt]')"
        )
    assert not (bundle.root / "opt" / entry["file"]).exists()


def test_aoti_small_batch_program_is_chosen_by_timing(bundle: Bundle) -> None:
    entry = _doc(bundle)["variants"]["aoti"]
    crossover = entry["details"]["small_batch"]
    timings = {int(b): ms for b, ms in crossover["timing_ms"].items()}
    batches = sorted(timings)
    assert batches == [2**i for i in range(len(batches))]  # 1, 2, 4, ... probed in order
    won = [timings[b]["small_batch"] < timings[b]["model"] for b in batches]
    # Probing stops at the first loss (or the probe limit); max_batch is the last win.
    assert all(won[:-1]) and (not won[-1] or batches[-1] == min(32, SMALL_BATCH_PROBE_LIMIT))
    assert crossover["max_batch"] == max(
        (b for b, w in zip(batches, won, strict=True) if w), default=0
    )
    path = bundle.root / "opt" / entry["file"]
    runner = load_variant_file(VariantEntry(**entry), path, torch.device("cpu"))
    if crossover["max_batch"] == 0:
        assert not isinstance(runner, BatchSizeDispatch)
        with pytest.raises(Exception):  # noqa: B017 - the package holds one program only
            load_package(str(path), SMALL_BATCH_PROGRAM)
        return
    assert isinstance(runner, BatchSizeDispatch) and runner.small_max == crossover["max_batch"]
    ran = []
    for name, program in list(runner.runners.items()):
        runner.runners[name] = lambda x, p=program, n=name: ran.append(n) or p(x)
    x = torch.randn(runner.small_max + 1, 3, 32, 32)
    with torch.inference_mode():
        small, large = runner(x[: runner.small_max]), runner(x)
    assert ran == [SMALL_BATCH_PROGRAM, LARGE_BATCH_PROGRAM]
    # Both programs compute the same function.
    assert torch.allclose(small, large[: runner.small_max], atol=1e-4)


@pytest.mark.slow
def test_aoti_without_small_batch_program(tmp_path: Path) -> None:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 32 * 32, 10),
    ).eval()  # fmt: skip
    cfg = OptimizeConfig(max_batch=8, opt_batch=4, aoti_small_batch=False)
    ctx = variants.BuildContext(model, torch.device("cpu"), cfg, tmp_path)
    spec = variants.Spec("aoti", "aoti", "fp32", "aoti.pt2")
    details = builders.build_aoti(spec, ctx, tmp_path / spec.file)
    assert "small_batch" not in details
    with pytest.raises(Exception):  # noqa: B017 - AOTI raises a bare RuntimeError
        load_package(str(tmp_path / spec.file), SMALL_BATCH_PROGRAM)
    x = torch.randn(3, 3, 32, 32)
    with torch.inference_mode():
        entry = VariantEntry(
            kind="aoti", file=spec.file, precision="fp32", status="built",
            cpu_capability=cpu_capability(), details=details,
        )  # fmt: skip
        out = load_variant_file(entry, tmp_path / spec.file, x.device)(x)
    assert torch.allclose(out, model(x), atol=1e-4)


def test_outputs_and_manifest(bundle: Bundle) -> None:
    out = bundle.root / "outputs"
    assert (out / "optimized_uri").read_text() == bundle.optimized_uri
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seconds"] > 0
    assert summary["variants"]["aoti"]["status"] == "built"
    doc = _doc(bundle)
    assert doc["input"]["normalised"] is True
    assert doc["batch_range"] == {"min": 1, "opt": 8, "max": 32}
    assert doc["weights_sha256"] and doc["environment"]["torch"] == torch.__version__


def test_rerun_with_same_weights_and_settings_reuses(bundle: Bundle, tmp_path: Path) -> None:
    args = optimize_args(bundle.model_uri, bundle.dataset_uri, bundle.root / "opt")
    args.outputs_dir = tmp_path
    result = optimize.run(args)
    assert result.reused
    assert json.loads((tmp_path / "summary.json").read_text())["reused"]


@pytest.mark.parametrize(
    ("optional", "outcome"), [([], "fails the step"), (["perturbed"], "is recorded")]
)
def test_perturbed_variant_fails_the_gate(
    bundle: Bundle, tmp_path: Path, optional: list[str], outcome: str
) -> None:
    # A TorchScript file of the model with its weights perturbed, built by an extra
    # variant's own builder (tests/helpers/faulty_builders.py) in the step's build process.
    args = optimize_args(
        bundle.model_uri,
        bundle.dataset_uri,
        tmp_path / "opt",
        "optimize.variants=[]",
        f"optimize.extra_variants=[{extra('perturbed', 'perturbed_torchscript')}]",
        f"optimize.optional_variants={json.dumps(optional)}",
    )
    message = (
        r"perturbed \(fp32\) failed the parity gate on 64 held-out images: "
        r"max \|logit diff\| [\d.e+-]+ > 0\.001 \(optimize\.fp32_max_abs_diff\), "
        r"top-1 agreement [\d.]+ [<>]=? 0\.995 \(optimize\.min_top1_agreement\)"
    )
    if not optional:
        with pytest.raises(optimize.OptimizeError, match=message):
            optimize.run(args)
        assert not (tmp_path / "opt" / "variants.json").exists()
    else:
        entry = optimize.run(args).manifest.document()["variants"]["perturbed"]
        assert entry["status"] == "failed"
        assert entry["parity"]["max_abs_diff"] > 1e-3
        assert re.search(message, entry["reason"])


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        (["optimize.min_batch=64", "optimize.opt_batch=8"], ConfigError, "min_batch <= opt_batch"),
        (["optimize.optional_variants=[tflite]"], ConfigError, "unknown tflite"),
    ],
)
def test_bad_settings_fail_before_any_work(
    bundle: Bundle,
    tmp_path: Path,
    overrides: list[str],
    error: type,
    match: str,
) -> None:
    args = optimize_args(bundle.model_uri, bundle.dataset_uri, tmp_path, *overrides)
    with pytest.raises(error, match=match):
        optimize.run(args)


def test_missing_model_is_a_user_error(bundle: Bundle, tmp_path: Path) -> None:
    args = optimize_args(tmp_path.as_uri(), bundle.dataset_uri, tmp_path / "opt")
    with pytest.raises(InputError, match=r"model\.json: missing; pass the MODEL_URI"):
        optimize.run(args)


@pytest.mark.parametrize(
    ("model", "code", "stderr"),
    [
        ("GOOD", 0, r"torchscript +fp32 +built"),
        ("/nonexistent/model", 2, r"^optimize: error: file:///nonexistent/model/model\.json"),
    ],
)
def test_cli(bundle: Bundle, tmp_path: Path, model: str, code: int, stderr: str) -> None:
    model = bundle.model_uri if model == "GOOD" else model
    command = [sys.executable, "-m", "steps.optimize", "--model", model]
    command += ["--dataset", bundle.dataset_uri, "--output", str(tmp_path / "opt")]
    command += ["--set", "optimize.variants=[torchscript]", "--outputs-dir", str(tmp_path / "o")]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    assert re.search(stderr, done.stderr, re.M)
    assert "Traceback" not in done.stderr
    if code == 0:
        assert done.stdout.strip() == (tmp_path / "opt").as_uri()


def test_mlflow_gets_files_numbers_and_environment(
    bundle: Bundle,
    tmp_path: Path,
    mlflow_server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    args = optimize_args(
        bundle.model_uri, bundle.dataset_uri, tmp_path / "opt", "optimize.variants=[torchscript]"
    )
    client = mlflow.MlflowClient(mlflow_server.uri)

    def run_ids() -> set[str]:  # the server is shared with other tests: find this test's run
        experiments = [e.experiment_id for e in client.search_experiments()]
        return {r.info.run_id for r in client.search_runs(experiments)} if experiments else set()

    before = run_ids()
    optimize.run(args)
    (run_id,) = run_ids() - before
    run = client.get_run(run_id)
    metrics = run.data.metrics
    assert metrics["optimize/torchscript/built"] == 1.0
    assert metrics["optimize/torchscript/max_abs_diff"] <= 1e-3
    assert metrics["optimize/torchscript/size_mb"] > 0
    assert run.data.tags["optimize.env.torch"] == torch.__version__
    files = {f.path for f in client.list_artifacts(run.info.run_id, "optimized")}
    assert {"optimized/torchscript.pt", "optimized/variants.json"} <= files


@pytest.mark.skipif(not HAS_TENSORRT, reason="needs CUDA and torch-tensorrt")
def test_tensorrt_variants_pass_parity_on_gpu(bundle: Bundle, tmp_path: Path) -> None:
    args = optimize_args(
        bundle.model_uri, bundle.dataset_uri, tmp_path / "opt", "optimize.variants=[tensorrt]"
    )
    doc = optimize.run(args).manifest.document()
    for name in ("tensorrt_fp32", "tensorrt_fp16", *(["tensorrt_int8"] if HAS_MODELOPT else [])):
        assert doc["variants"][name]["status"] == "built", doc["variants"][name]
        assert doc["variants"][name]["parity"]["passed"]


CONFIGS = sorted((REPO_ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_variant_a_config_names_is_known(path: Path) -> None:
    # optional_variants is checked only when optimize runs: a typo would surface on a cluster.
    opt = load_config(path).optimize
    assert set(opt.variants) <= set(variants.KINDS), opt.variants
    unknown = set(opt.optional_variants) - set(variants.KINDS) - set(variants.NAMES)
    assert not unknown, f"{path.name}: optimize.optional_variants names {sorted(unknown)}"


def test_config_variant_kinds_are_the_kinds_optimize_builds() -> None:
    (literal,) = typing.get_args(OptimizeConfig.model_fields["variants"].annotation)
    kinds = set(typing.get_args(literal))
    assert kinds == set(variants.KINDS) == set(builders.BUILDERS)
