"""S3 housekeeping that neither Iceberg nor pyarrow does: aborting incomplete multipart uploads.

pyarrow's S3 output stream starts a multipart upload when a data file is opened and completes it
when the file is closed. A writer killed (or cut off from S3) while a file is open leaves the
upload incomplete: its parts are stored and billed, but no listing of objects shows them, so
deleting "the transaction's files" never finds them. The reconciler aborts a dead transaction's
uploads (their keys start with ``<table>/data/<txn_id>-``) and maintenance aborts every upload
under a table's data folder older than a threshold. boto3 does this; pyarrow has no API for it.

In remote-signing mode the table's FileIO properties carry the catalog's signer and no keys: the
listing and the aborts are then signed by the catalog too (``signing.make_signed_client``), never
sent with static keys nor unsigned.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from .signing import make_signed_client, remote_signing

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})


def is_s3(location: str | None) -> bool:
    return location is not None and urlsplit(location).scheme in S3_SCHEMES


def abort_incomplete_uploads(
    properties: Mapping[str, str],
    location: str,
    *,
    txn_id: uuid.UUID | None = None,
    initiated_before: datetime | None = None,
) -> int:
    """Abort the incomplete multipart uploads under ``<location>/data/``: those of ``txn_id``
    (its data files are named ``<txn_id>-NNNNN.parquet``), or every one initiated before
    ``initiated_before``. ``properties`` are the table FileIO's (endpoint and credentials, vended
    or the ``TRIDENT_S3_*`` settings, or the catalog's signer). Returns how many were aborted; a location that is not on S3
    has none. Storage errors propagate: the caller keeps the cleanup pending and retries later."""
    if not is_s3(location):
        return 0
    parts = urlsplit(location)
    bucket = parts.netloc
    prefix = f"{parts.path.strip('/')}/data/"
    if txn_id is not None:
        prefix += f"{txn_id}-"
    props = dict(properties)
    client = (
        make_signed_client(props)
        if remote_signing(props)
        else _client(tuple(sorted((k, v) for k, v in properties.items() if k.startswith("s3.") or k == "client.region")))
    )
    aborted = 0
    for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
        for upload in page.get("Uploads", []):
            if initiated_before is not None and upload["Initiated"] >= initiated_before:
                continue
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
            aborted += 1
    return aborted


@lru_cache(maxsize=8)
def _client(properties: tuple[tuple[str, str], ...]) -> Any:
    """One boto3 client per set of FileIO properties (creating one costs ~50 ms of model loading).
    Short timeouts and few retries: an unreachable store must fail the cleanup quickly, which
    then stays pending for the next reconcile instead of stalling this one."""
    import boto3
    from botocore.config import Config

    props = dict(properties)
    forced = props.get("s3.force-virtual-addressing", "").lower()
    style = "virtual" if forced == "true" else "path" if forced == "false" or props.get("s3.endpoint") else "auto"
    return boto3.client(
        "s3",
        endpoint_url=props.get("s3.endpoint"),
        aws_access_key_id=props.get("s3.access-key-id"),
        aws_secret_access_key=props.get("s3.secret-access-key"),
        aws_session_token=props.get("s3.session-token"),
        region_name=props.get("s3.region") or props.get("client.region") or "us-east-1",
        config=Config(
            connect_timeout=5,
            read_timeout=30,
            retries={"max_attempts": 2, "mode": "standard"},
            s3={"addressing_style": style},
        ),
    )
