"""The benchmark's promotion: the decision between challenger and champion, the registry's
line naming the version, the alias moved for the better model only against a real
``mlflow server``, and the previous version recorded never this run's own nor one that did
not serve."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch

from steps.benchmark import step as benchmark
from steps.benchmark.champion import decide
from steps.benchmark.previous import previous_version
from steps.common import optimized_variants
from steps.common.config import PipelineConfig
from steps.common.contracts import TRACKING_OFF, Challenger, Champion, Decision, Promotion
from steps.common.models import build_model
from steps.optimize import step as optimize
from tests.helpers.model_bundle import (
    WIDTH,
    Bundle,
    bench_args,
    optimize_args,
    save_model,
)

CPU = "cpu-a (2 threads)"


@pytest.mark.parametrize(
    ("challenger", "champion", "promoted", "reason"),
    [
        ((0.90, 5.0, CPU), None, True, "^first champion$"),
        ((0.92, 5.0, CPU), (0.90, 5.0, CPU), True, r"accuracy 0\.9200 >= 0\.8980"),
        ((0.899, 5.0, CPU), (0.90, 5.0, CPU), True, r"accuracy 0\.8990 >= 0\.8980"),
        ((0.89, 5.0, CPU), (0.90, 5.0, CPU), False, r"accuracy 0\.8900 < 0\.8980"),
        ((0.95, 5.4, CPU), (0.90, 5.0, CPU), True, r"5\.400 ms <= 5\.500 ms"),
        ((0.95, 5.6, CPU), (0.90, 5.0, CPU), False, r"5\.600 ms > 5\.500 ms"),
        ((0.95, 50.0, "H100"), (0.90, 5.0, CPU), True, "latency not compared: champion measured"),
    ],
    ids=["first", "better", "within-margin", "worse", "slower-ok", "too-slow", "other-device"],
)
def test_promotion_decision(challenger, champion, promoted: bool, reason: str) -> None:
    cfg = PipelineConfig()  # accuracy_margin 0.002, latency_margin 10 %

    acc, p50, device = challenger
    contender = Challenger(acc, p50, gate_batch=256, device_name=device, variant="onnx")
    holder = None
    if champion:
        acc, p50, device = champion
        holder = Champion("3", acc, p50_ms=p50, gate_batch=256, device_name=device)
    decision = decide(contender, holder, cfg)
    assert decision.promoted is promoted
    assert re.search(reason, decision.reason)


def _promotion(promoted: bool | None, version: str, reason: str = "") -> Promotion:
    if promoted is None:  # MLflow tracking off: no decision
        return Promotion.untracked()
    challenger = Challenger(0.9, 5.0, gate_batch=256, device_name=CPU, variant="onnx")
    decision = Decision(challenger, None, 0.002, 0.1, promoted, reason)
    return Promotion.of(decision, "cifar10-classifier", "champion", version)


@pytest.mark.parametrize(
    ("promotion", "line"),
    [
        (_promotion(True, "1", "first champion"), "promoted: v1 (first champion)"),
        (
            _promotion(False, "4", "accuracy 0.8900 < 0.8980"),
            "not promoted: v4 (accuracy 0.8900 < 0.8980)",
        ),
        (_promotion(None, ""), f"not promoted: {TRACKING_OFF}"),
    ],
    ids=["first", "kept", "untracked"],
)
def test_the_registry_line_names_the_version(promotion: Promotion, line: str) -> None:
    """What the report and the run's description say: the version, then why."""
    assert promotion.verdict() == line


@pytest.mark.parametrize(
    ("champion", "previous"),
    [
        (None, ""),
        ({"version": "4", "mlflow_run_id": "other", "previous_champion": "3"}, "4"),
        ({"version": "4", "mlflow_run_id": "this", "previous_champion": "3"}, "3"),
        ({"version": "4", "mlflow_run_id": "this", "previous_champion": "none"}, ""),
        ({"version": "4", "mlflow_run_id": None, "previous_champion": None}, "4"),
    ],
    ids=["first", "another-run", "retry-of-this-run", "retry-of-a-first", "tagged-by-hand"],
)
def test_previous_version_is_never_this_runs_own(champion, previous: str) -> None:
    # A retried benchmark finds its first attempt's version on the alias: the champion
    # before the run is the one that version replaced.
    assert previous_version(champion, "this") == previous


def test_registry_promotes_the_better_model_only(
    bundle: Bundle,
    tmp_path: Path,
    mlflow_server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An untrained model becomes the first champion; the trained one replaces it; a
    second untrained one is registered but the alias stays on the trained one."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    reads: list[str] = []  # variants.json is read once a run, and handed to the gate

    def read_variants(uri: str, storage):
        reads.append(uri)
        return real_read(uri, storage)

    real_read = optimized_variants.read_variants
    monkeypatch.setattr(optimized_variants, "read_variants", read_variants)
    name = "cifar10-registry-test"
    untrained = save_model(
        build_model("resnet9", 10, WIDTH).eval(), bundle.dataset_uri, tmp_path / "u"
    )
    torch.manual_seed(1)
    untrained2 = save_model(
        build_model("resnet9", 10, WIDTH).eval(), bundle.dataset_uri, tmp_path / "u2"
    )
    sets = [f"benchmark.registered_model={name}", "benchmark.latency_margin=100"]
    sets += ["benchmark.batch_sizes=[1, 4]", "benchmark.rounds=1"]
    untracked = ["optimize.variants=[torchscript]", "tracking.enabled=false"]
    outcomes = []
    for i, model in enumerate([untrained, bundle.model_uri, untrained2]):
        opt = tmp_path / f"opt{i}"
        optimize.run(optimize_args(model, bundle.dataset_uri, opt, *untracked))
        args = bench_args(
            model,
            opt.as_uri(),
            bundle.dataset_uri,
            tmp_path / f"r{i}",
            *sets,
            outputs_dir=tmp_path / f"o{i}",
        )
        reads.clear()
        outcome = benchmark.run(args)
        assert reads == [opt.as_uri()]
        outcomes.append(outcome.promoted)
        summary = json.loads((tmp_path / f"o{i}" / "summary.json").read_text())
        assert summary["promoted"] is outcome.promoted
    assert outcomes == [True, True, False]
    # Who held the alias before each run: what a failed live check moves it back to.
    previous = [(tmp_path / f"o{i}" / "previous-version").read_text() for i in range(3)]
    assert previous == ["", "1", "2"]
    # What the deploy task reads: whether the alias moved, to which version (3: rejected)
    read = [
        {n: (tmp_path / f"o{i}" / n).read_text() for n in ("promoted", "model-version")}
        for i in range(3)
    ]
    assert read == [
        {"promoted": "true", "model-version": "1"},
        {"promoted": "true", "model-version": "2"},
        {"promoted": "false", "model-version": "3"},
    ]
    client = mlflow.MlflowClient(mlflow_server.uri)
    champion = client.get_model_version_by_alias(name, "champion")
    assert champion.version == "2"
    assert champion.tags["previous_champion"] == "1"
    assert client.get_model_version(name, "1").tags["previous_champion"] == "none"
    assert champion.tags["dataset_digest"] == bundle.dataset_uri.rsplit("/", 1)[1]
    assert champion.tags["best_variant"] in ("eager", "torchscript")
    assert champion.tags["promotion"].startswith("promoted: accuracy")
    rejected = client.get_model_version(name, "3")
    assert rejected.tags["promotion"].startswith("rejected: accuracy")
    run = client.get_run(champion.tags["mlflow_run_id"])
    # A few headline metrics, not a chart per number; the numbers are one table.
    bench_metrics = {k for k in run.data.metrics if k.startswith("bench/")}
    assert bench_metrics == {
        "bench/accuracy",
        "bench/best/accuracy",
        "bench/best/p50_ms",
        "bench/best/images_per_s",
        "bench/best/speedup_vs_eager",
    }
    assert run.data.metrics["bench/accuracy"] == 1.0
    table = mlflow.load_table("benchmark/table.json", run_ids=[run.info.run_id])
    row = table[(table["variant"] == "torchscript") & (table["batch"] == 4)].iloc[0]
    assert row["p50_ms"] > 0 and row["images_per_s"] > 0 and row["peak_mem_mb"] >= 0
    assert set(table["variant"]) == {"eager", "torchscript"} and len(table) == 4
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("**Test accuracy** 1.0000")
    assert f"**Best variant** {champion.tags['best_variant']} (fp32): p50 " in note
    assert f"models:/{name}/2" in note
    files = {f.path for f in client.list_artifacts(run.info.run_id, "benchmark")}
    names = ("benchmark.json", "report.md", "benchmark.png", "table.json")
    assert files == {f"benchmark/{f}" for f in names}
    # optimize.variants=[torchscript]: no portable variant, so the champion is the serving
    # pyfunc over the torch variants, served by the image that built them; its input is
    # uint8 pixels as for any champion (it was the FP32 torch.export model, which the live
    # check's UINT8 request was refused by).
    assert champion.tags["serving"].startswith("pyfunc: bs 1 ")
    assert set(re.findall(r"bs \d+ (\w+)", champion.tags["serving"])) <= {"eager", "torchscript"}
    assert champion.tags["serving_image"].rsplit("/", 1)[1].startswith("cifar-optimize:")
    uri = f"models:/{name}@champion"
    (spec,) = mlflow.models.get_model_info(uri).signature.inputs.inputs
    assert (spec.type, spec.shape) == (np.dtype(np.uint8), (-1, 32, 32, 3))
    loaded = mlflow.pyfunc.load_model(uri)
    assert loaded.predict(np.zeros((2, 32, 32, 3), np.uint8))["class"].shape == (2,)


# A chain of earlier champions: version -> (served?, the version it replaced)
CHAIN = {"5": (False, "4"), "4": (False, "3"), "3": (True, "2"), "2": (True, "none")}


@pytest.mark.parametrize(
    ("champion", "previous"),
    [
        ({"version": "3", "mlflow_run_id": "other"}, "3"),
        ({"version": "5", "mlflow_run_id": "other"}, "3"),
        ({"version": "6", "mlflow_run_id": "this", "previous_champion": "5"}, "3"),
        ({"version": "9", "mlflow_run_id": "other"}, "9"),  # unreadable: kept
    ],
    ids=["served", "two-that-did-not-serve", "retry-over-one-that-did-not", "set-by-hand"],
)
def test_previous_version_is_never_one_that_did_not_serve(champion, previous: str) -> None:
    """Issue 30: a version left on the alias without serving (its deployment failed, or
    its run was stopped) is never what a later rollback goes back to."""

    def lookup(version: str) -> dict | None:
        if version not in CHAIN:
            return None
        served, replaced = CHAIN[version]
        return {"served": served, "previous_champion": replaced}

    assert previous_version(champion, "this", lookup) == previous


def test_the_registry_says_which_versions_served(mlflow_server) -> None:
    """served_lookup against a real MLflow server: a version tagged serving.rollback, or
    promoted by a run that ended FAILED or KILLED, did not serve; one whose run FINISHED
    (or that names no run) did."""
    from steps.benchmark.previous import ROLLBACK_TAG, served_lookup
    from steps.serve_check.rollback import ROLLBACK_TAG as CHECK_TAG

    assert ROLLBACK_TAG == CHECK_TAG
    client = mlflow.MlflowClient(mlflow_server.uri)
    name = f"served-lookup-{time.time_ns()}"
    client.create_registered_model(name)
    experiment = client.create_experiment(name)
    wanted = {}
    for ended, tag, served in [
        ("FINISHED", None, True),
        ("FAILED", None, False),
        ("KILLED", None, False),
        ("FINISHED", "rolled back: served accuracy 0.1", False),
        (None, None, True),
    ]:
        version = client.create_model_version(name, "s3://nowhere/model").version
        if ended:
            run = client.create_run(experiment).info.run_id
            client.set_terminated(run, status=ended)
            client.set_model_version_tag(name, version, "mlflow_run_id", run)
        if tag:
            client.set_model_version_tag(name, version, ROLLBACK_TAG, tag)
        client.set_model_version_tag(name, version, "previous_champion", "none")
        wanted[str(version)] = served
    lookup = served_lookup(client, name)
    assert {v: lookup(v)["served"] for v in wanted} == wanted
    assert lookup("999") is None
