"""steps.optimize's portable variants: ONNX Runtime and OpenVINO FP32 pass the FP32 parity
gate, their INT8 quantizations the agreement gate (or are not shipped, saying by how much),
every file reloads in a Python without torch or ``steps``, and a runtime that is not
installed makes its variant skipped, not failed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from steps.common.config import PipelineConfig
from steps.common.trained_model import load_test_split, load_trained, normalize
from steps.optimize import isolated, optimize_model
from steps.optimize import step as optimize
from tests.helpers.model_bundle import Bundle, InProcessWorker, optimize_args
from tests.helpers.paths import REPO_ROOT

PORTABLE = ["onnx", "openvino"]
INT8 = ["onnx_int8", "openvino_int8"]
NOT_SHIPPED = r"\(int8\) not shipped: agreement 0\.\d{3} < 0\.990 by 0\.\d{3} on \d+ test images"


def _doc(b: Bundle) -> dict:
    return json.loads((b.root / "opt" / "variants.json").read_text())


@pytest.mark.parametrize("name", PORTABLE)
def test_fp32_variants_pass_the_fp32_gate(bundle: Bundle, name: str) -> None:
    entry = _doc(bundle)["variants"][name]
    assert entry["status"] == "built", entry.get("reason")
    assert entry["parity"]["max_abs_diff"] <= 1e-3 and entry["parity"]["top1_agreement"] == 1.0
    files = entry["details"].get("files", [entry["file"]])
    assert sum((bundle.root / "opt" / f).stat().st_size for f in files) == entry["size_bytes"]


@pytest.mark.parametrize("name", INT8)
def test_int8_variants_are_gated_on_agreement(bundle: Bundle, name: str) -> None:
    entry = _doc(bundle)["variants"][name]
    assert entry["precision"] == "int8" and entry["optional"]
    assert entry["details"]["calibration_images"] == 300
    agreement = entry["parity"]["top1_agreement"]
    if entry["status"] == "built":
        assert (
            agreement >= 0.99
            and entry["size_bytes"] < _doc(bundle)["variants"]["onnx"]["size_bytes"]
        )
    else:
        assert entry["status"] == "failed" and re.search(NOT_SHIPPED, entry["reason"])


def test_int8_below_the_gate_is_not_shipped(
    bundle: Bundle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Calibrating on images 50x too dim clips every real activation: agreement collapses.
    # (The step hands the build process its calibration images: dimmed here, on their way.)
    real = optimize_model._calibration
    monkeypatch.setattr(optimize_model, "_calibration", lambda *a: real(*a) * 0.02)
    args = optimize_args(
        bundle.model_uri, bundle.dataset_uri, tmp_path / "opt", "optimize.variants=[onnx]"
    )
    doc = optimize.run(args).manifest.document()  # optional by default: the step still succeeds
    entry = doc["variants"]["onnx_int8"]
    assert entry["status"] == "failed"
    assert re.search("onnx_int8 " + NOT_SHIPPED, entry["reason"]), entry["reason"]
    assert not (tmp_path / "opt" / "model_int8.onnx").exists()
    assert doc["variants"]["onnx"]["status"] == "built"


@pytest.mark.parametrize(("module", "kind"), [("onnxruntime", "onnx"), ("openvino", "openvino")])
def test_runtime_not_installed_is_skipped_with_reason(
    bundle: Bundle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    kind: str,
) -> None:
    monkeypatch.setattr(isolated, "Worker", InProcessWorker)  # the build where the patch is
    monkeypatch.setitem(sys.modules, module, None)  # what find_spec sees of a missing package
    args = optimize_args(
        bundle.model_uri, bundle.dataset_uri, tmp_path / "opt", f"optimize.variants=[{kind}]"
    )
    doc = optimize.run(args).manifest.document()
    entry = doc["variants"][kind]
    assert entry["status"] == "skipped"
    assert f"{module} not installed (pip install 'cifar-pipeline[{kind}]')" in entry["reason"]


RELOAD = """
import sys, json, numpy as np
sys.path.insert(0, ".")  # -I leaves the working dir off the path: only runners.py is there
import runners
out = {}
for name, (kind, file, details) in json.loads(sys.argv[1]).items():
    run = runners.load_runner(kind, __import__("pathlib").Path(file), details, 1)
    out[name] = run(np.load(sys.argv[2])).tolist()
assert "torch" not in sys.modules and "steps" not in sys.modules, "imported torch or steps"
print(json.dumps(out))
"""


def test_portable_files_reload_without_torch_or_steps(bundle: Bundle, tmp_path: Path) -> None:
    doc = _doc(bundle)
    built = {
        n: e for n, e in doc["variants"].items() if e["kind"] in PORTABLE and e["status"] == "built"
    }
    assert {"onnx", "openvino"} <= set(built)
    shutil.copy(REPO_ROOT / "steps/common/serving/runners.py", tmp_path / "runners.py")
    cfg = PipelineConfig()
    trained = load_trained(bundle.model_uri, cfg.storage, torch.device("cpu"))
    x = normalize(
        load_test_split(bundle.dataset_uri, cfg.storage).images[:16], trained.mean, trained.std
    )
    np.save(tmp_path / "x.npy", x.numpy())
    spec = {
        n: (e["kind"], str(bundle.root / "opt" / e["file"]), e["details"]) for n, e in built.items()
    }
    done = subprocess.run(
        [sys.executable, "-I", "-c", RELOAD, json.dumps(spec), str(tmp_path / "x.npy")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        expected = trained.model(x)
    scale = (expected.max() - expected.min()).item()
    for name, logits in json.loads(done.stdout).items():
        logits = torch.tensor(logits)
        error = (logits - expected).abs().max().item()
        if built[name]["precision"] == "fp32":
            assert error <= 1e-3, name
        else:
            # INT8 error depends on the CPU's int8 kernels (AMX, VNNI, plain AVX2 round
            # differently): the classes must be the same, the logits within 10% of their range
            assert torch.equal(logits.argmax(1), expected.argmax(1)), name
            assert error <= 0.1 * scale, (name, error, scale)
