"""The buckets of the install, created over S3 by the one identity that may (cifar-admin):
each missing one is made, an existing one kept, so the Job may run again. Endpoint and
keys from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY);
the names from the arguments."""

import sys

import boto3
from botocore.exceptions import ClientError

REFUSED = "; are these cifar-admin's keys (Secret seaweedfs-admin)?"


def main(buckets: list[str]) -> int:
    s3 = boto3.client("s3")
    for bucket in buckets:
        try:
            s3.head_bucket(Bucket=bucket)
            print(f"bucket {bucket}: exists, kept")
            continue
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code not in ("404", "NoSuchBucket"):
                hint = REFUSED if code in ("403", "AccessDenied") else ""
                print(f"bucket {bucket}: cannot look it up ({code}){hint}", file=sys.stderr)
                return 1
        try:
            s3.create_bucket(Bucket=bucket)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            hint = REFUSED if code == "AccessDenied" else ""
            print(f"bucket {bucket}: not created ({code}){hint}", file=sys.stderr)
            return 1
        print(f"bucket {bucket}: created")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
