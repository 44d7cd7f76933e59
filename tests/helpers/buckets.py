"""A bucket of the session's SeaweedFS S3 (tests/conftest.py's ``s3_bucket``)."""

from __future__ import annotations

from dataclasses import dataclass

from flows.local.servers.seaweedfs import SeaweedFS


@dataclass
class S3Bucket:
    server: SeaweedFS
    name: str

    @property
    def uri(self) -> str:
        return f"s3://{self.name}"
