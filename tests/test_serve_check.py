"""steps.serve_check against a real endpoint: the champion pyfunc the benchmark registers,
served by the real ``mlflow models serve`` (the scoring protocol ``python -m steps.serve``
speaks too), and a real ``mlflow server`` holding the registry and the pipeline's run.

A passing check measures the benchmark's accuracy and logs it; a check made to fail for
real (a benchmark.json claiming another accuracy than the endpoint serves, or nothing
listening, or an endpoint of ``python -m steps.serve`` serving another version than the one
promoted) moves the alias back to the previous champion, or removes it after a first
deployment, logs the decision and exits 3, the verdict the workflow does not retry; a
retried check neither rolls back twice nor passes after a rollback; an endpoint that
drops the check once it answered is no verdict (exit 1, nothing rolled back)."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.exceptions import MlflowException

from flows.local.servers.mlflow_server import mlflow_models_serve
from flows.local.servers.seaweedfs import free_port
from steps.benchmark import step as benchmark
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.per_image import pack_correct
from steps.serve_check import step as serve_check
from steps.serve_check.expected import expected_accuracy
from tests.helpers.model_bundle import Bundle, champion_args
from tests.helpers.serving_helpers import serving

NAME = "serve-check-test"
CHECK = ["serving.check_concurrency=[1, 4]"]


@pytest.fixture(scope="module")
def champion(bundle: Bundle, tmp_path_factory, mlflow_server) -> dict:
    """The pipeline's run, and v1 of NAME promoted into it by the real benchmark step. Not
    the session's champion (conftest.py), which this module's fixture overrides: these
    tests move the alias of their own registered model."""
    root = tmp_path_factory.mktemp("serve-check")
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = mlflow_server.uri
    try:
        client = mlflow.MlflowClient(mlflow_server.uri)
        experiment = client.create_experiment(f"serve-check-{time.time_ns()}")
        run_id = client.create_run(experiment).info.run_id
        args = champion_args(bundle, root / "report", NAME, outputs_dir=root / "bench-outputs")
        args.mlflow_run_id = run_id
        result = benchmark.run(args)
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI") if old is None else os.environ.update(
            MLFLOW_TRACKING_URI=old
        )
    doc = json.loads((root / "report" / "benchmark.json").read_text())
    return {"root": root, "result": result, "doc": doc, "run_id": run_id, "client": client}


@pytest.fixture(scope="module")
def served(champion: dict, mlflow_server) -> Iterator[str]:
    """``mlflow models serve`` of v1 on 127.0.0.1 (by version: the tests move the alias)."""
    with mlflow_models_serve(f"models:/{NAME}/1", mlflow_server.uri, champion["root"]) as url:
        yield url


def check_argv(url: str, champion: dict, bench: str, out: Path, *sets: str) -> list[str]:
    argv = ["--url", url, "--dataset", champion["doc"]["dataset_uri"], "--benchmark", bench]
    argv += ["--mlflow-run-id", champion["run_id"], "--outputs-dir", str(out)]
    argv += ["--wait-s", "2", "--time-limit-s", "120", "--timeout-s", "30"]
    for item in [*CHECK, *sets]:
        argv += ["--set", item]
    return argv


def alias_version(client, alias: str = "champion") -> str | None:
    try:
        return client.get_model_version_by_alias(NAME, alias).version
    except MlflowException:
        return None


def test_benchmark_records_what_the_champion_serves_and_replaced(champion: dict) -> None:
    promotion = champion["doc"]["promotion"]
    assert promotion["promoted"] and promotion["version"] == "1"
    assert promotion["previous_version"] == ""  # a first champion
    assert promotion["served_by_batch"]  # the pyfunc's dispatch table, variants measured
    assert (champion["root"] / "bench-outputs" / "previous-version").read_text() == ""
    tags = champion["client"].get_model_version(NAME, "1").tags
    assert tags["previous_champion"] == "none"


def test_a_passing_check_logs_the_served_numbers(
    champion: dict, served: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_server
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    report = str(champion["root"] / "report")  # the report URI: its benchmark.json is read
    args = serve_check.build_parser().parse_args(check_argv(served, champion, report, tmp_path))
    result = serve_check.run(args)
    doc, client = champion["doc"], champion["client"]
    low, high, _ = expected_accuracy(BenchmarkReport.parse(doc))
    margin = 0.002  # benchmark.accuracy_margin's default
    assert result.passed and result.images == doc["test_images"]
    assert low - margin <= result.accuracy <= high + margin
    assert set(result.by_concurrency) == {1, 4}
    assert (tmp_path / "passed").read_text() == "true"
    assert float((tmp_path / "accuracy").read_text()) == pytest.approx(result.accuracy)
    assert (tmp_path / "previous-version").read_text() == ""
    run = client.get_run(champion["run_id"])
    metrics = run.data.metrics
    assert metrics["serving/accuracy"] == pytest.approx(result.accuracy)
    for n in (1, 4):
        cell = result.by_concurrency[n]
        assert 0 < cell.p50_ms <= cell.p99_ms and cell.requests_per_s > 0
        assert metrics[f"serving/c{n}/p99_ms"] == pytest.approx(cell.p99_ms)
    assert metrics["serving/p50_ms"] == pytest.approx(result.by_concurrency[1].p50_ms)
    by4 = result.by_concurrency[4].requests_per_s
    assert metrics["serving/requests_per_s"] == pytest.approx(by4)
    assert run.data.tags["serving.url"] == served
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("**Test accuracy** ")  # the benchmark's description is kept
    assert f"**Endpoint** `{served}`: live check passed: accuracy " in note
    assert alias_version(client) == "1"
    # mlflow models serve has no GET /v2/models/<name>: the version goes unconfirmed, and
    # no GET /v2 declaring binary tensors: ``auto`` speaks MLflow's scoring protocol
    assert result.version_confirmed is False
    assert result.protocol == "mlflow"
    assert json.loads((tmp_path / "summary.json").read_text())["protocol"] == "mlflow"


def failed_doc(champion: dict, version: str, previous: str, claimed: float | None) -> dict:
    """benchmark.json as the benchmark of a run promoting ``version`` over ``previous``
    writes it; ``claimed``: the accuracy it says the served variants have."""
    doc = json.loads(json.dumps(champion["doc"]))
    doc["promotion"].update(version=version, previous_version=previous, promoted=True)
    if claimed is not None:  # the accuracy and the per-image results it is made of
        images = int(doc["test_images"])
        correct = np.arange(images) < round(claimed * images)
        for name in set(doc["promotion"]["served_by_batch"].values()):
            doc["variants"][name]["accuracy"] = claimed
            doc["variants"][name]["correct"] = pack_correct(correct)
    return doc


@pytest.mark.parametrize(
    ("cause", "previous", "failed", "decision"),
    [
        ("accuracy", "1", "is not the benchmark's 0.5000 (",
         "alias champion of serve-check-test moved back from v{v} to v1"),
        ("accuracy", "", "is not the benchmark's 0.5000 (",
         "alias champion of serve-check-test removed (v{v} was the first champion)"),
        ("unreachable", "1", "unreachable: ",
         "alias champion of serve-check-test moved back from v{v} to v1"),
    ],
    ids=["wrong-accuracy-back-to-previous", "first-deployment-alias-removed", "unreachable"],
)  # fmt: skip
def test_a_failed_check_rolls_back_once(
    champion: dict,
    served: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    mlflow_server,
    cause: str,
    previous: str,
    failed: str,
    decision: str,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    client = champion["client"]
    # This run's champion: a new version of the same model, promoted over ``previous``.
    version = client.create_model_version(NAME, f"models:/{NAME}/1").version
    client.set_registered_model_alias(NAME, "champion", version)
    doc = failed_doc(champion, version, previous, 0.5 if cause == "accuracy" else None)
    bench = tmp_path / "benchmark.json"
    bench.write_text(json.dumps(doc))
    url = served if cause == "accuracy" else f"http://127.0.0.1:{free_port()}"
    expected = decision.format(v=version)
    for attempt in (1, 2):  # the retry finds the alias already back: it moves nothing
        out = tmp_path / f"out{attempt}"
        code = serve_check.main(check_argv(url, champion, str(bench), out))
        assert code == serve_check.VERDICT_EXIT == 3
        err = capsys.readouterr().err
        (line,) = [line for line in err.splitlines() if "error:" in line]
        assert "Traceback" not in err
        assert line.startswith("serve_check: error: ") and failed in line, line
        if attempt == 1:
            assert line.endswith(expected), line
        else:  # not checked again: the verdict, from the version's tag, stands
            assert f"v{version} no longer holds alias champion" in line, line
            assert "nothing to roll back" in line, line
        assert alias_version(client) == (previous or None)
        assert (out / "passed").read_text() == "false"
        assert (out / "previous-version").read_text() == previous
    run = client.get_run(champion["run_id"])
    assert failed in run.data.tags["serving.rollback"]
    note = run.data.tags["mlflow.note.content"]
    assert note.count("**Rollback**") == 1 and "nothing to roll back" in note  # the retry's
    assert note.count("**Endpoint**") == 1 and "live check FAILED" in note
    assert failed in client.get_model_version(NAME, version).tags["serving.rollback"]
    client.set_registered_model_alias(NAME, "champion", "1")  # as the other tests expect


def test_a_retry_after_a_rollback_never_passes(
    champion: dict,
    served: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    mlflow_server,
) -> None:
    """Attempt 1 fails (another accuracy than the benchmark's) and moves the alias back; by
    attempt 2 the endpoint answers as the benchmark said (a rollout that finished late):
    it still fails, without checking, so the run cannot end Succeeded serving a version
    the alias no longer names (issue 30, defect 2)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    client = champion["client"]
    version = client.create_model_version(NAME, f"models:/{NAME}/1").version
    client.set_registered_model_alias(NAME, "champion", version)
    bench = tmp_path / "benchmark.json"
    bench.write_text(json.dumps(failed_doc(champion, version, "1", 0.5)))
    codes = [serve_check.main(check_argv(served, champion, str(bench), tmp_path / "1"))]
    assert alias_version(client) == "1"
    bench.write_text(json.dumps(failed_doc(champion, version, "1", None)))  # right, now
    codes.append(serve_check.main(check_argv(served, champion, str(bench), tmp_path / "2")))
    err = capsys.readouterr().err
    assert codes == [serve_check.VERDICT_EXIT] * 2, err
    assert f"{NAME} v{version} no longer holds alias champion, which points at v1" in err
    assert (tmp_path / "2" / "passed").read_text() == "false"
    assert json.loads((tmp_path / "2" / "summary.json").read_text())["by_concurrency"] == {}
    assert alias_version(client) == "1"


DROPS = """
import http.server, json, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # /ping: up; /v2/models/<name>: it serves v1, as steps.serve says
        body = json.dumps({"name": sys.argv[2], "versions": ["1"]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):  # a predictor that dies on the request: the connection drops
        self.connection.close()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_an_endpoint_dropping_the_check_is_no_verdict(
    champion: dict, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the endpoint answered, a request that gets no answer at all (the connection
    dropped) is not the endpoint's verdict: exit 1, which the workflow retries, and the
    registry is not touched (no --mlflow-run-id here, MLFLOW_TRACKING_URI unset)."""
    import subprocess
    import sys

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", DROPS, str(port), NAME])
    try:
        url = f"http://127.0.0.1:{port}"
        argv = ["--url", url, "--dataset", champion["doc"]["dataset_uri"]]
        argv += ["--benchmark", str(champion["root"] / "report"), "--wait-s", "30"]
        argv += ["--timeout-s", "5", "--outputs-dir", str(tmp_path), "--set", CHECK[0]]
        code = serve_check.main(argv)
    finally:
        server.kill()
        server.wait()
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"serve_check: error: {url} stopped answering during the check" in err, err
    assert not (tmp_path / "passed").exists()  # no verdict written


def test_the_wait_is_the_configs_ready_timeout(
    champion: dict, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --wait-s the check waits serving.ready_timeout_s (the deploy step's deadline),
    not a fixed minute, for the endpoint to serve."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    url = f"http://127.0.0.1:{free_port()}"
    argv = ["--url", url, "--dataset", champion["doc"]["dataset_uri"]]
    argv += ["--benchmark", str(champion["root"] / "report"), "--outputs-dir", str(tmp_path)]
    argv += ["--set", "serving.ready_timeout_s=1.5"]
    started = time.monotonic()
    code = serve_check.main(argv)
    err = capsys.readouterr().err
    assert code == serve_check.VERDICT_EXIT, err
    assert f"{url} unreachable: " in err and "(waited 1.5 s)" in err, err
    assert time.monotonic() - started < 30


def test_an_alias_moved_since_by_another_run_is_left_alone(
    champion: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_server
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    client = champion["client"]
    doc = failed_doc(champion, "99", "1", None)  # this run's v99 lost the alias to v1 since
    bench = tmp_path / "benchmark.json"
    bench.write_text(json.dumps(doc))
    url = f"http://127.0.0.1:{free_port()}"
    args = serve_check.build_parser().parse_args(check_argv(url, champion, str(bench), tmp_path))
    with pytest.raises(serve_check.CheckFailed, match=r"already back on v1: nothing to roll"):
        serve_check.run(args)
    client.set_registered_model_alias(NAME, "champion", "1")
    doc = failed_doc(champion, "99", "", None)
    bench.write_text(json.dumps(doc))
    with pytest.raises(serve_check.CheckFailed, match=r"points at v1, not this run's v99: left"):
        serve_check.run(args)
    assert alias_version(client) == "1"


def test_the_check_confirms_the_version_this_run_deployed(
    champion: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_server
) -> None:
    """Against ``python -m steps.serve`` (which answers ``GET /v2/models/<name>``): v1
    served and promoted is confirmed; a run that promoted v2 while v1 still answers (a
    re-apply whose rollout has not happened) fails naming both, and rolls the alias back."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    client = champion["client"]
    report = str(champion["root"] / "report")
    with serving({"uri": mlflow_server.uri}, model=f"models:/{NAME}/1") as ours:
        args = serve_check.build_parser().parse_args(
            check_argv(ours.url, champion, report, tmp_path / "ok")
        )
        result = serve_check.run(args)
        assert result.passed and result.version_confirmed is True
        # GET /v2 declares binary_tensor_data: ``auto`` checks it as KServe's clients call it
        assert result.protocol == "v2"
        # the same server on MLflow's scoring route, as configured, serves the same answers
        argv = check_argv(ours.url, champion, report, tmp_path / "mlflow")
        argv += ["--set", "serving.check_protocol=mlflow"]
        by_mlflow = serve_check.run(serve_check.build_parser().parse_args(argv))
        assert by_mlflow.passed and by_mlflow.protocol == "mlflow"
        assert by_mlflow.accuracy == result.accuracy

        version = client.create_model_version(NAME, f"models:/{NAME}/1").version
        client.set_registered_model_alias(NAME, "champion", version)
        bench = tmp_path / "benchmark.json"
        bench.write_text(json.dumps(failed_doc(champion, version, "1", None)))
        started = time.monotonic()
        args = check_argv(ours.url, champion, str(bench), tmp_path / "stale")
        with pytest.raises(serve_check.CheckFailed) as failed:
            serve_check.run(serve_check.build_parser().parse_args(args))
    message = str(failed.value)
    assert f"it serves v1, not {NAME} v{version} that this run deployed (waited 2 s)" in message
    assert message.endswith(f"moved back from v{version} to v1"), message
    assert 2 <= time.monotonic() - started < 60  # it waited --wait-s for the rollout
    assert alias_version(client) == "1"
    assert (tmp_path / "stale" / "passed").read_text() == "false"


def test_a_check_on_fewer_images_expects_the_benchmarks_accuracy_on_those(
    champion: dict,
    served: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mlflow_server,
) -> None:
    """``serving.check_samples`` below the benchmark's count: the expected accuracy is the
    benchmark's on the same first images (its per-image results), and the live check on
    them passes; an older benchmark.json without them is refused naming the setting."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    doc = champion["doc"]
    names = sorted(set(doc["promotion"]["served_by_batch"].values()))
    count = 37
    # The truth, from the bits the benchmark packed: first 37 images, by hand.
    by_hand = np.stack([
        np.unpackbits(np.frombuffer(base64.b64decode(doc["variants"][n]["correct"]),
                                    dtype=np.uint8))[:count].astype(bool)
        for n in names
    ])  # fmt: skip
    low, high, _ = expected_accuracy(BenchmarkReport.parse(doc), count)
    # any dispatched variant may answer an image: every one right .. any one right
    assert (low, high) == (by_hand.all(axis=0).mean(), by_hand.any(axis=0).mean())
    report = str(champion["root"] / "report")
    argv = check_argv(served, champion, report, tmp_path, f"serving.check_samples={count}")
    result = serve_check.run(serve_check.build_parser().parse_args(argv))
    assert result.passed and result.images == count
    assert result.expected_accuracy.low == low
    # more than the benchmark measured: only what it measured is sent
    more = int(doc["test_images"]) + 50
    argv = check_argv(served, champion, report, tmp_path, f"serving.check_samples={more}")
    assert serve_check.run(serve_check.build_parser().parse_args(argv)).images == int(
        doc["test_images"]
    )
    old = json.loads(json.dumps(doc))
    for variant in old["variants"].values():
        if variant["status"] == "measured":  # per-image results not recorded
            variant["correct"] = None
    old_report = BenchmarkReport.parse(old)
    with pytest.raises(serve_check.BadInput, match=r"serving.check_samples 37 < the benchmark"):
        expected_accuracy(old_report, count)
    # without per-image results: the variants' lowest and highest accuracy, which the
    # per-image range holds
    accuracies = [float(doc["variants"][n]["accuracy"]) for n in names]
    old_low, old_high, _ = expected_accuracy(old_report)
    assert (old_low, old_high) == (min(accuracies), max(accuracies))
    low, high, _ = expected_accuracy(BenchmarkReport.parse(doc))
    assert low <= old_low <= old_high <= high
