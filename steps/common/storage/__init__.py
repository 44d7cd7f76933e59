"""One small interface over a directory (plain path or ``file://``) and ``s3://`` (boto3).

Readers never see half an object: a local write goes to a temporary name in the same
directory and is renamed into place; an S3 object appears whole when its (multipart)
upload completes. A result made of several objects is published by writing its
manifest last, which is the caller's job (see ``steps.stage_data``).

S3 credentials come only from the environment or an AWS profile (boto3's own chain),
never from config files; the endpoint comes from config or ``AWS_ENDPOINT_URL``.
"""

from steps.common.storage.base import ProgressCallback, StorageError, Store, join_uri
from steps.common.storage.local import LocalStore
from steps.common.storage.s3 import S3Store
from steps.common.storage.uri import open_store, split_uri

__all__ = [
    "LocalStore",
    "ProgressCallback",
    "S3Store",
    "StorageError",
    "Store",
    "join_uri",
    "open_store",
    "split_uri",
]
