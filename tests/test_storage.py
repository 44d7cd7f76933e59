"""The storage interface over directories and a real SeaweedFS S3 server."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from flows.local.servers.seaweedfs import SeaweedFS, free_port
from steps.common.config import StorageConfig
from steps.common.config.fields import UriError
from steps.common.storage import LocalStore, S3Store, StorageError, open_store, split_uri
from tests.helpers.buckets import S3Bucket


@pytest.mark.parametrize(
    ("uri", "kind", "root"),
    [
        ("/data/x", LocalStore, "file:///data/x"),
        ("file:///data/x", LocalStore, "file:///data/x"),
        ("s3://bucket/some/prefix", S3Store, "s3://bucket/some/prefix"),
        ("s3://bucket", S3Store, "s3://bucket"),
    ],
)
def test_open_store_by_scheme(uri: str, kind: type, root: str) -> None:
    store = open_store(uri)
    assert isinstance(store, kind)
    assert store.root == root


@pytest.mark.parametrize(
    ("uri", "match"),
    [
        ("gs://bucket/x", r"unsupported scheme 'gs'"),
        ("s3:///x", r"needs a bucket name"),
    ],
)
def test_open_store_rejects(uri: str, match: str) -> None:
    with pytest.raises(UriError, match=match):
        open_store(uri)


def test_local_write_is_atomic_and_leaves_no_temp(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "root"))
    store.write_bytes("a/b.json", b"one")
    store.write_bytes("a/b.json", b"two")
    assert store.read_bytes("a/b.json") == b"two"
    assert store.list("a") == ["a/b.json"]
    assert [p.name for p in (tmp_path / "root" / "a").iterdir()] == ["b.json"]
    assert (tmp_path / "root" / "a" / "b.json").stat().st_mode & 0o777 == 0o644


def test_local_write_that_fails_midway_leaves_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.write_bytes("x.bin", b"old")

    def explode(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store._atomic_write("x.bin", explode)
    assert store.read_bytes("x.bin") == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]


def test_local_unwritable_path_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError, match=r"file/sub/x: cannot write \(Not a directory\)"):
        open_store(str(blocker / "sub")).write_bytes("x", b"1")


def test_split_uri_finds_store_and_key(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text("{}")
    store, key = split_uri((tmp_path / "m.json").as_uri())
    assert store.read_bytes(key) == b"{}"
    s3_store, s3_key = split_uri("s3://bucket/a/b/c.tar.gz")
    assert (s3_store.root, s3_key) == ("s3://bucket", "a/b/c.tar.gz")


def test_s3_round_trip_with_multipart(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    cfg = StorageConfig(multipart_threshold_mb=5, multipart_chunksize_mb=5)
    store = open_store(f"{s3_bucket.uri}/prefix", cfg)
    payload = os.urandom(12 * 1024 * 1024 + 17)  # three parts
    (tmp_path / "big.bin").write_bytes(payload)
    seen: list[int] = []
    store.upload_file(tmp_path / "big.bin", "d/big.bin", seen.append)
    store.write_bytes("d/small.json", b'{"a": 1}')
    assert sum(seen) == len(payload)
    assert store.exists("d/big.bin") and not store.exists("d/missing")
    assert store.size("d/big.bin") == len(payload)
    assert store.list("d") == ["d/big.bin", "d/small.json"]
    store.download_file("d/big.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == payload
    # Multipart: the ETag of a multipart object carries its part count.
    head = s3_bucket.server.client().head_object(Bucket=s3_bucket.name, Key="prefix/d/big.bin")
    assert head["ETag"].strip('"').endswith("-3")
    store.delete("d/small.json")
    assert store.list("d") == ["d/big.bin"]


def test_s3_missing_bucket_is_named(s3_bucket: S3Bucket) -> None:
    store = open_store("s3://no-such-bucket-here/x")
    with pytest.raises(StorageError, match=r"bucket 'no-such-bucket-here' does not exist"):
        store.exists("k")
    with pytest.raises(StorageError, match=r"bucket 'no-such-bucket-here' does not exist"):
        store.write_bytes("k", b"1")


def test_s3_bad_credentials_are_named(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(StorageError, match=r"access denied"):
        open_store(s3_bucket.uri).write_bytes("k", b"1")


def test_s3_unreachable_endpoint_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    endpoint = f"http://127.0.0.1:{free_port()}"
    store = open_store("s3://bucket/x", StorageConfig(endpoint_url=endpoint))
    start = time.monotonic()
    with pytest.raises(StorageError, match=rf"cannot reach S3 endpoint {endpoint}"):
        store.write_bytes("k", b"1")
    assert time.monotonic() - start < 20


def test_a_seaweedfs_that_cannot_write_names_the_disk(tmp_path: Path) -> None:
    """SeaweedFS's volume server registers no capacity while the free space under its data
    is below ``-volume.minFreeSpace``: it answers S3, but no write lands. The fixture's
    error then names the disk and its free space (a full /tmp once failed 19 tests here
    with only "did not become ready"). Asked to keep 100% free, the real server shows it."""
    args, env = SeaweedFS.TEST_VOLUMES
    server = SeaweedFS(tmp_path / "weed", volumes=([*args, "-volume.minFreeSpace=100"], env))
    with pytest.raises(
        RuntimeError,
        match=r"did not become ready in 4 s \(the disk holding \S+ has [\d.]+ GiB free of "
        r"\d+ GiB, under the 100% its volume server needs free before it takes a write",
    ):
        server.start(timeout_s=4)
    assert SeaweedFS(tmp_path / "other")._low_disk() == ""  # 1%: this disk has room
