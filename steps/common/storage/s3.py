"""``s3://bucket/prefix`` as a store, moved with boto3's transfer manager (imported on use:
a store that is never opened costs nothing)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from steps.common.config import StorageConfig
from steps.common.storage.base import MB, ProgressCallback, StorageError, join_uri


class S3Store:
    """Objects under ``s3://bucket/prefix``, moved with boto3's transfer manager."""

    def __init__(self, bucket: str, prefix: str, cfg: StorageConfig) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.bucket, self.prefix, self.cfg = bucket, prefix, cfg
        self.root = join_uri(f"s3://{bucket}", prefix)
        endpoint = cfg.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        self.endpoint = endpoint or "AWS S3"
        session = boto3.session.Session(region_name=cfg.region)
        self.client = session.client(
            "s3",
            endpoint_url=endpoint,
            config=Config(
                connect_timeout=cfg.connect_timeout_s,
                read_timeout=60,
                retries={"max_attempts": cfg.max_attempts, "mode": "standard"},
                s3={"addressing_style": "path"} if endpoint else None,
            ),
        )
        self._bucket_checked = False
        self.transfer = TransferConfig(
            multipart_threshold=cfg.multipart_threshold_mb * MB,
            multipart_chunksize=cfg.multipart_chunksize_mb * MB,
            max_concurrency=cfg.max_concurrency,
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def uri(self, key: str) -> str:
        return join_uri(self.root, key)

    def _error(self, key: str, exc: Exception, action: str) -> StorageError:
        from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

        where = self.uri(key)
        if isinstance(exc, EndpointConnectionError):
            return StorageError(f"{where}: cannot reach S3 endpoint {self.endpoint}")
        if isinstance(exc, NoCredentialsError):
            return StorageError(
                f"{where}: no S3 credentials; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                "or AWS_PROFILE"
            )
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                return StorageError(f"{where}: no such object")
            if code == "NoSuchBucket":
                return StorageError(f"{where}: bucket {self.bucket!r} does not exist")
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return StorageError(f"{where}: access denied ({code}); check the credentials")
            return StorageError(f"{where}: cannot {action} ({code or exc})")
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return StorageError(f"{where}: cannot {action} ({message})")

    def _call(self, key: str, action: str, fn: Callable[[], object]) -> object:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn()
        except S3UploadFailedError as exc:
            # The transfer manager wraps the cause in text only; keep its last line.
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, (BotoCoreError, ClientError)):
                raise self._error(key, cause, action) from None
            raise StorageError(f"{self.uri(key)}: cannot {action} ({exc})") from None
        except (BotoCoreError, ClientError) as exc:
            raise self._error(key, exc, action) from None

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                self._require_bucket(key)
                return False
            raise self._error(key, exc, "read") from None
        except Exception as exc:
            raise self._error(key, exc, "read") from None

    def _require_bucket(self, key: str) -> None:
        """A missing bucket also answers 404 to HEAD object: tell the two apart."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except BotoCoreError as exc:
            raise self._error(key, exc, "read") from None
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchBucket", "NotFound"):
                raise StorageError(
                    f"{self.uri(key)}: bucket {self.bucket!r} does not exist"
                ) from None
            raise self._error(key, exc, "read") from None

    def size(self, key: str) -> int:
        head = self._call(
            key, "read", lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        )
        return int(head["ContentLength"])  # type: ignore[index]

    def read_bytes(self, key: str) -> bytes:
        body = self._call(
            key, "read", lambda: self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        )
        return body["Body"].read()  # type: ignore[index]

    def _check_bucket_once(self, key: str) -> None:
        # Some servers (SeaweedFS) create a missing bucket on PUT: a typo would then write
        # somewhere nobody looks. Refuse instead, as S3 does.
        if not self._bucket_checked:
            self._require_bucket(key)
            self._bucket_checked = True

    def write_bytes(self, key: str, data: bytes) -> None:
        self._check_bucket_once(key)
        self._call(
            key,
            "write",
            lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data),
        )

    def upload_file(self, path: Path, key: str, progress: ProgressCallback | None = None) -> None:
        self._check_bucket_once(key)
        self._call(
            key,
            "upload",
            lambda: self.client.upload_file(
                str(path), self.bucket, self._key(key), Config=self.transfer, Callback=progress
            ),
        )

    def download_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None:
        self._call(
            key,
            "download",
            lambda: self.client.download_file(
                self.bucket, self._key(key), str(path), Config=self.transfer, Callback=progress
            ),
        )

    def list(self, prefix: str = "") -> list[str]:
        full = self._key(prefix)
        keys: list[str] = []

        def collect() -> None:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(obj["Key"] for obj in page.get("Contents", []))

        self._call(prefix, "list", collect)
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted(k[strip:] for k in keys)

    def delete(self, key: str) -> None:
        self._call(
            key, "delete", lambda: self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        )
