"""A real S3 endpoint on loopback for tests: moto's threaded server, with one bucket.

Why a server and not `moto.mock_aws`: pyiceberg's PyArrowFileIO talks S3 through
pyarrow's C++ client, which an in-process botocore mock cannot intercept, and the
REST catalog runs in another process. Both need a real HTTP endpoint.

Caveat: moto keeps its state per *process*, so every `ThreadedMotoServer` (and any
`mock_aws`) in one test process shares the same buckets. Use distinct bucket names.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import boto3
from moto.server import ThreadedMotoServer


@dataclass(frozen=True)
class S3Server:
    """Where the running S3 endpoint is and how to reach it."""

    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    region: str

    def pyiceberg_properties(self) -> dict[str, str]:
        """FileIO properties for pyiceberg (and lakana storage options, same keys).

        Path-style addressing is required: pyiceberg 0.12 turns pyarrow's
        virtual-host addressing ON by default, and `<bucket>.127.0.0.1` does not resolve.
        """
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.region": self.region,
            "s3.force-virtual-addressing": "false",
        }

    def boto3_client(self):
        """A boto3 S3 client pointed at this server, for assertions in tests."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name=self.region,
        )


@contextmanager
def s3_server(bucket: str | None = None, region: str = "us-east-1") -> Iterator[S3Server]:
    """Start moto on 127.0.0.1 with an OS-chosen port, create `bucket`, stop on exit."""
    # werkzeug logs every request at INFO to stderr unless its logger has a level already.
    if logging.getLogger("werkzeug").level == logging.NOTSET:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        info = S3Server(
            endpoint=f"http://{host}:{port}",
            bucket=bucket or f"trident-test-{uuid.uuid4().hex[:12]}",
            # moto accepts any credentials; fixed ones keep the properties deterministic.
            access_key_id="testing",
            secret_access_key="testing",
            region=region,
        )
        extra = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        info.boto3_client().create_bucket(Bucket=info.bucket, **extra)
        yield info
    finally:
        server.stop()
