"""The staging step on real CIFAR-format tarballs, a real HTTP download and real S3."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import pickle
import re
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from flows.local.servers.seaweedfs import SeaweedFS, free_port
from steps.common.config import load_config
from steps.common.dataset import content_digest
from steps.common.storage import open_store
from steps.stage_data.cifar import md5sum, synthetic_splits
from steps.stage_data.stage import parse_source, stage_dataset
from tests.helpers.buckets import S3Bucket
from tests.helpers.cifar_files import CLASSES, write_cifar_tarball
from tests.helpers.paths import REPO_ROOT


def stage_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "steps.stage_data", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def load_staged(dataset_uri: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a staged dataset back with nothing but the store and numpy."""
    store = open_store(dataset_uri)
    manifest = json.loads(store.read_bytes("manifest.json"))
    arrays = {}
    for name in ("train_images", "train_labels", "test_images", "test_labels"):
        raw = store.read_bytes(f"{name}.npy")
        assert hashlib.sha256(raw).hexdigest() == manifest["files"][f"{name}.npy"]["sha256"]
        arrays[name] = np.load(io.BytesIO(raw), allow_pickle=False)
    return manifest, arrays


@pytest.fixture
def tarball(tmp_path: Path):
    path = tmp_path / "cifar-10-python.tar.gz"
    expected = write_cifar_tarball(path, per_batch=20, seed=1)
    return path, expected


@pytest.mark.parametrize("dest_kind", ["path", "file-uri", "s3"])
def test_tarball_is_staged_exactly(
    dest_kind: str, tarball, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path, expected = tarball
    if dest_kind == "s3":
        dest = request.getfixturevalue("s3_bucket").uri + "/pipeline"
    else:
        dest = str(tmp_path / "root")
        dest = Path(dest).as_uri() if dest_kind == "file-uri" else dest
    cfg = load_config(overrides=[f"data.md5={md5sum(path)}"])
    result = stage_dataset(parse_source(str(path)), dest, cfg)

    assert result.dataset_uri.startswith(open_store(dest).root + "/datasets/cifar10/")
    assert result.dataset_uri.endswith(result.digest)
    assert (result.num_train, result.num_test, result.already_staged) == (100, 20, False)
    manifest, arrays = load_staged(result.dataset_uri)
    for name in arrays:
        assert np.array_equal(arrays[name], getattr(expected, name)), name
    assert arrays["train_images"].dtype == np.uint8
    assert arrays["train_images"].shape == (100, 32, 32, 3)
    assert arrays["train_labels"].dtype == np.int64
    # The official row layout is channel-major: pixel (0, 0) is bytes 0, 1024 and 2048.
    with tarfile.open(path) as tar:
        batch = pickle.load(tar.extractfile("cifar-10-batches-py/data_batch_1"), encoding="bytes")
    assert list(arrays["train_images"][0, 0, 0]) == [batch[b"data"][0][i] for i in (0, 1024, 2048)]
    assert manifest["digest"] == result.digest == content_digest(manifest["files"])
    assert manifest["classes"] == [c.decode() for c in CLASSES]
    assert manifest["counts"] == {"train": 100, "test": 20}
    assert (
        manifest["class_counts"]["train"]
        == np.bincount(expected.train_labels, minlength=10).tolist()
    )
    assert manifest["source_md5"] == md5sum(path)


def test_tarball_source_can_live_in_s3(s3_bucket: S3Bucket, tarball, tmp_path: Path) -> None:
    path, expected = tarball
    s3_bucket.server.client().upload_file(str(path), s3_bucket.name, "mirror/cifar.tar.gz")
    result = stage_cli(
        "--source",
        f"{s3_bucket.uri}/mirror/cifar.tar.gz",
        "--dest",
        str(tmp_path / "root"),
        "--md5",
        md5sum(path),
    )
    assert result.returncode == 0, result.stderr
    _, arrays = load_staged(result.stdout.strip())
    assert np.array_equal(arrays["test_images"], expected.test_images)


class FlakyTarballServer(http.server.ThreadingHTTPServer):
    """Serves one file; the first ``failures`` requests get 503, as a busy mirror might."""

    def __init__(self, payload: bytes, failures: int) -> None:
        self.payload, self.failures, self.requests = payload, failures, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                if outer.requests <= outer.failures:
                    self.send_error(503)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.payload)))
                self.end_headers()
                self.wfile.write(outer.payload)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/cifar-10-python.tar.gz"


@pytest.fixture
def flaky_server(tarball) -> Iterator[FlakyTarballServer]:
    server = FlakyTarballServer(tarball[0].read_bytes(), failures=1)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def test_cifar10_download_retries_verifies_and_is_skipped_next_time(
    flaky_server: FlakyTarballServer, tarball, tmp_path: Path
) -> None:
    path, expected = tarball
    args = ["--source", "cifar10", "--dest", str(tmp_path / "root"), "--md5", md5sum(path)]
    args += ["--set", f"data.url={flaky_server.url}", "--outputs-dir", str(tmp_path / "out")]
    env = {"CIFAR_CACHE_DIR": str(tmp_path / "cache")}
    first = stage_cli(*args, env=env)
    assert first.returncode == 0, first.stderr
    assert flaky_server.requests == 2  # one 503, one retry
    assert (tmp_path / "cache" / "cifar-10-python.tar.gz").read_bytes() == path.read_bytes()
    _, arrays = load_staged(first.stdout.strip())
    assert np.array_equal(arrays["train_labels"], expected.train_labels)
    assert (tmp_path / "out" / "dataset_uri").read_text() == first.stdout.strip()
    assert (tmp_path / "out" / "num_train").read_text() == "100"

    (tmp_path / "cache" / "cifar-10-python.tar.gz").unlink()
    second = stage_cli(*args, env=env)
    assert second.returncode == 0, second.stderr
    assert "Already staged" in second.stderr
    assert flaky_server.requests == 2  # known md5 -> index hit, no download at all
    assert second.stdout == first.stdout


def test_download_checksum_mismatch_keeps_nothing(flaky_server, tmp_path: Path) -> None:
    result = stage_cli(
        "--source", "cifar10", "--dest", str(tmp_path / "root"),
        "--set", f"data.url={flaky_server.url}",
        env={"CIFAR_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("stage_data: error: ")
    assert "does not match the expected c58f30108f718f92721af3b95e74349a" in result.stderr
    assert not list((tmp_path / "cache").glob("*.tar.gz*"))
    assert not (tmp_path / "root").exists() or not list((tmp_path / "root").rglob("manifest.json"))


def test_synthetic_is_deterministic_balanced_and_learnable(tmp_path: Path) -> None:
    cfg = load_config()
    a = stage_dataset(parse_source("synthetic:2000"), str(tmp_path / "a"), cfg)
    b = stage_dataset(parse_source("synthetic:2000"), str(tmp_path / "b"), cfg)
    other_seed = load_config(overrides=["data.synthetic_seed=1"])
    c = stage_dataset(parse_source("synthetic:2000"), str(tmp_path / "c"), other_seed)
    assert a.digest == b.digest != c.digest
    assert (a.num_train, a.num_test) == (2000, 400)
    assert a.class_counts["train"] == [200] * 10

    # Learnable: a nearest-centroid rule on per-channel means beats chance (10%) by far.
    splits = synthetic_splits(2000, seed=0)
    feats = lambda x: x.reshape(len(x), -1, 3).mean(axis=1)  # noqa: E731
    centroids = np.stack(
        [feats(splits.train_images)[splits.train_labels == k].mean(0) for k in range(10)]
    )
    dist = ((feats(splits.test_images)[:, None, :] - centroids[None]) ** 2).sum(-1)
    accuracy = (dist.argmin(1) == splits.test_labels).mean()
    assert accuracy > 0.5, accuracy


def test_the_config_alone_says_what_to_stage_and_where(tmp_path: Path) -> None:
    """The workflow passes only ``--set``: data.source and storage.root_uri are what the step
    stages and where; ``--source`` and ``--dest`` are shorthands naming the same."""
    root = (tmp_path / "root").as_uri()
    by_config = stage_cli("--set", "data.source=synthetic:200", "--set", f"storage.root_uri={root}")
    assert by_config.returncode == 0, by_config.stderr
    assert "Staged 200 train + 40 test images" in by_config.stderr
    assert by_config.stdout.startswith(f"{root}/datasets/")
    by_shorthand = stage_cli("--source", "synthetic:200", "--dest", root)
    assert by_shorthand.returncode == 0, by_shorthand.stderr
    assert "Already staged" in by_shorthand.stderr
    assert by_shorthand.stdout == by_config.stdout


def test_restaging_is_a_noop_and_cli_writes_outputs(tmp_path: Path) -> None:
    args = ["--source", "synthetic:500", "--dest", str(tmp_path / "root")]
    first = stage_cli(*args, "--outputs-dir", str(tmp_path / "out"))
    assert first.returncode == 0, first.stderr
    assert "Staged 500 train + 100 test images" in first.stderr
    manifest = next((tmp_path / "root").rglob("manifest.json"))
    mtime = manifest.stat().st_mtime_ns
    outputs = {p.name: p.read_text() for p in (tmp_path / "out").iterdir()}
    assert outputs["dataset_uri"] == first.stdout.strip() == manifest.parent.as_uri()
    assert outputs["digest"] == manifest.parent.name
    assert (outputs["num_train"], outputs["num_test"]) == ("500", "100")
    assert json.loads(outputs["summary.json"])["already_staged"] is False

    second = stage_cli(*args)
    assert second.returncode == 0, second.stderr
    assert "Already staged" in second.stderr and "Staged 500" not in second.stderr
    assert second.stdout == first.stdout
    assert manifest.stat().st_mtime_ns == mtime

    # Without the source index the content digest still finds the manifest.
    for index in (tmp_path / "root").rglob("sources/*.json"):
        index.unlink()
    third = stage_cli(*args)
    assert "same content; nothing to do" in third.stderr
    assert manifest.stat().st_mtime_ns == mtime


def test_staging_never_imports_torch() -> None:
    probe = "import sys, steps.stage_data.step; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert out.stdout.strip() == "False", out.stderr


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        ("wrong-checksum", 1, r"md5 [0-9a-f]{32} does not match the expected 0{32}"),
        ("truncated", 1, r"truncated or not a gzip tarball"),
        ("missing-member", 1, r"missing member cifar-10-batches-py/data_batch_3"),
        ("missing-meta", 1, r"missing member cifar-10-batches-py/batches\.meta"),
        ("no-such-file", 1, r"nope\.tar\.gz: no such file"),
        ("unreachable-endpoint", 1, r"cannot reach S3 endpoint http://127\.0\.0\.1:\d+"),
        ("missing-bucket", 1, r"bucket 'no-such-bucket-x' does not exist"),
        ("missing-s3-tarball", 1, r"s3://test-\w+/nope\.tar\.gz: no such object"),
        ("unwritable-path", 1, r"cannot write \(Not a directory\)"),
        ("bad-source", 2, r"--source synthetic:abc: expected synthetic or synthetic:N"),
        ("bad-override", 2, r"--set storage\.max_concurrency=0: storage\.max_concurrency"),
    ],
)
def test_bad_input_is_one_line_nonzero_and_leaves_no_manifest(
    case: str, code: int, message: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tar = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_tarball(
        tar,
        per_batch=5,
        omit={"missing-member": "data_batch_3", "missing-meta": "batches.meta"}.get(case),
    )
    dest, env = str(tmp_path / "root"), {}
    args = ["--source", str(tar), "--md5", "none"]
    if case == "wrong-checksum":
        args[-1] = "0" * 32
    elif case == "truncated":
        _truncate(tar)
    elif case == "no-such-file":
        args[1] = str(tmp_path / "nope.tar.gz")
    elif case == "bad-source":
        args[1] = "synthetic:abc"
    elif case == "bad-override":
        args += ["--set", "storage.max_concurrency=0"]
    elif case == "unreachable-endpoint":
        dest, env = "s3://bucket/x", {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
        env |= {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    elif case == "missing-bucket":
        server: SeaweedFS = request.getfixturevalue("seaweedfs")
        dest, env = "s3://no-such-bucket-x/x", server.env()
    elif case == "missing-s3-tarball":
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        args[1], env = f"{bucket.uri}/nope.tar.gz", bucket.server.env()
    elif case == "unwritable-path":
        (tmp_path / "blocker").write_text("a file where a directory should be")
        dest = str(tmp_path / "blocker" / "root")

    result = stage_cli(*args, "--dest", dest, env=env)
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("stage_data: error: ")
    assert len([line for line in lines if "error" in line.lower()]) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert re.search(message, lines[-1]), lines[-1]
    assert not list(tmp_path.rglob("manifest.json"))
    if case == "missing-bucket":
        names = [b["Name"] for b in server.client().list_buckets()["Buckets"]]
        assert "no-such-bucket-x" not in names


@pytest.mark.slow
def test_s3_server_killed_mid_upload_then_rerun_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = SeaweedFS(tmp_path / "weed").start()
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    try:
        client = server.client()
        client.create_bucket(Bucket="datasets")
        args = ["--source", "synthetic:20000", "--dest", "s3://datasets/root"]
        args += ["--set", "storage.multipart_chunksize_mb=5", "--set", "storage.max_concurrency=1"]
        process = subprocess.Popen(
            [sys.executable, "-m", "steps.stage_data", *args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if client.list_multipart_uploads(Bucket="datasets").get("Uploads"):
                break
            time.sleep(0.02)
        assert process.poll() is None, "staging finished before the server could be killed"
        server.kill()
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 1, stderr
        assert stderr.strip().splitlines()[-1].startswith("stage_data: error: s3://datasets/root/")

        server.start()
        keys = [o["Key"] for o in client.list_objects_v2(Bucket="datasets").get("Contents", [])]
        assert not [k for k in keys if k.endswith("manifest.json")], keys

        rerun = stage_cli(*args)
        assert rerun.returncode == 0, rerun.stderr
        manifest, arrays = load_staged(rerun.stdout.strip())
        assert manifest["counts"] == {"train": 20000, "test": 4000}
        assert arrays["train_images"].shape == (20000, 32, 32, 3)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("host", "says"),
    [
        pytest.param("cifar-mirror.invalid", "does not resolve", id="no-name-service"),
        pytest.param("127.0.0.1:{port}", "refused the connection", id="connection-refused"),
    ],
)
def test_offline_download_fails_at_once_and_names_the_alternatives(
    host: str, says: str, tmp_path: Path
) -> None:
    """No network (no name service, or nothing listening): one line at once, exit 2 (the
    config must name another source; the workflow's retryStrategy retries no exit 2)."""
    url = f"http://{host.format(port=free_port())}/cifar-10-python.tar.gz"
    started = time.monotonic()
    result = stage_cli(
        "--source", "cifar10", "--dest", str(tmp_path / "root"), "--set", f"data.url={url}",
        env={"CIFAR_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - started < 30  # no backoff (the default: 2 + 4 + 8 + 16 s)
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"stage_data: error: cannot download {url}: "), line
    assert says in line and "attempt" not in line, line
    assert "configs/smoke.yaml" in line and "data.source=/path/to/cifar-10-python.tar.gz" in line
    assert "python " not in line  # a command here would not run where a pod prints it
