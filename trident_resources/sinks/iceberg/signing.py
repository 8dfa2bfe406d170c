"""Remote signing: every S3 request signed by the REST catalog (``TRIDENT_S3_CREDENTIALS=remote-signing``).

Lakekeeper signs S3 requests for stores without STS and tells clients to use pyiceberg's
``S3V4RestSigner`` (table config ``s3.remote-signing-enabled``, ``s3.signer.uri``,
``s3.signer.endpoint``). pyiceberg wires that signer only into ``FsspecFileIO``'s s3fs filesystem,
and s3fs cannot be installed next to the boto3 this project ships (aiobotocore pins an older
botocore). So this module gives ``FsspecFileIO`` an ``s3`` filesystem built on boto3 with the same
signer on the same botocore hook s3fs uses (``before-sign.s3``, botocore's own signing disabled):
data, manifest and metadata reads, writes, listings and deletes all go through it, and a request
the catalog does not sign is never sent unsigned (the signer raises instead).

``SignedS3FileIO`` is what ``py-io-impl`` names in remote-signing mode, so pyiceberg builds it for
every table it loads, with the table's config and the catalog's auth manager (the signer sends the
catalog's bearer token).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Any

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from pyiceberg.exceptions import SignError
from pyiceberg.io import S3_ENDPOINT, S3_FORCE_VIRTUAL_ADDRESSING, S3_REGION
from pyiceberg.io.fsspec import S3V4RestSigner
from pyiceberg.typedef import Properties
from pyiceberg.utils.properties import property_as_bool

from ...core.pyiceberg_compat import FsspecFileIOBase, register_fsspec_scheme

REMOTE_SIGNING_ENABLED = "s3.remote-signing-enabled"
CHECKSUM_PROPERTY = "trident.s3.checksum"
_PART_BYTES = 8 * 1024 * 1024  # S3's minimum part is 5 MiB (except the last)


def _s3_errors() -> tuple[type[Exception], ...]:
    """botocore's failures and the signer's. boto3/botocore are imported on first use, not with
    this module: the credentials module imports it for every catalog, and importing boto3 cost
    ~0.1-0.2 s of every process start (a Dagster run, the CLI) that never signs a request.
    By the time one of these can be raised, ``make_signed_client`` has imported them anyway."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError, SignError)


def _os_error(exc: Exception, what: str) -> OSError:
    """botocore/signer failures as the OSError family the rest of the engine (and pyarrow) expects,
    so a refused or unsigned request becomes ``StorageUnavailableError`` with this as its cause."""
    from botocore.exceptions import ClientError

    if isinstance(exc, SignError):
        return PermissionError(f"the catalog refused to sign {what}: {exc}")
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404 or code in ("NoSuchKey", "404", "NotFound"):
            return FileNotFoundError(2, f"no such object: {what}")
        if status == 403 or code in ("AccessDenied", "403", "ExpiredToken", "InvalidAccessKeyId"):
            return PermissionError(13, f"S3 refused {what}: {code}")
    return OSError(f"S3 request for {what} failed: {type(exc).__name__}: {exc}")


class SignedS3File(AbstractBufferedFile):
    """One S3 object: ranged GETs for reading; one PUT, or a multipart upload past one part, for
    writing (a writer killed mid-upload leaves an incomplete multipart upload, as pyarrow's does)."""

    fs: SignedS3FileSystem

    def __init__(self, fs: SignedS3FileSystem, path: str, mode: str = "rb", **kwargs: Any) -> None:
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        super().__init__(fs, path, mode, block_size=kwargs.pop("block_size", None) or _PART_BYTES, **kwargs)
        self.bucket, self.key = fs.split(path)

    def _fetch_range(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        try:
            response = self.fs.client.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={start}-{end - 1}")
            return bytes(response["Body"].read())
        except _s3_errors() as exc:
            raise _os_error(exc, f"s3://{self.path}") from exc

    def _initiate_upload(self) -> None:
        """Deferred: a file smaller than one part is written with a single PUT in ``_upload_chunk``."""

    def _upload_chunk(self, final: bool = False) -> bool:
        data = self.buffer.getvalue() if self.buffer is not None else b""
        client = self.fs.client
        try:
            if final and self._upload_id is None:
                client.put_object(Bucket=self.bucket, Key=self.key, Body=data)
                return True
            if self._upload_id is None:
                self._upload_id = client.create_multipart_upload(Bucket=self.bucket, Key=self.key)["UploadId"]
            if data or not self._parts:
                number = len(self._parts) + 1
                etag = client.upload_part(
                    Bucket=self.bucket, Key=self.key, UploadId=self._upload_id, PartNumber=number, Body=data
                )["ETag"]
                self._parts.append({"PartNumber": number, "ETag": etag})
            if final:
                client.complete_multipart_upload(
                    Bucket=self.bucket, Key=self.key, UploadId=self._upload_id, MultipartUpload={"Parts": self._parts}
                )
            return True
        except _s3_errors() as exc:
            raise _os_error(exc, f"s3://{self.path}") from exc


class SignedS3FileSystem(AbstractFileSystem):
    """The fsspec operations pyiceberg and pyarrow's ``FSSpecHandler`` use, on one boto3 client per
    thread (boto3 clients are not meant to be shared across threads for event registration)."""

    protocol = ("s3", "s3a", "s3n")
    cachable = False

    def __init__(self, properties: Properties, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._properties = properties
        self._local = threading.local()

    @property
    def client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = make_signed_client(self._properties)
        return client

    @staticmethod
    def split(path: str) -> tuple[str, str]:
        path = SignedS3FileSystem._strip_protocol(path)
        bucket, _, key = path.partition("/")
        return bucket, key

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except _s3_errors() as exc:
            raise _os_error(exc, what) from exc

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        bucket, key = self.split(path)
        prefix = f"{key.rstrip('/')}/" if key else ""
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
            if token:
                args["ContinuationToken"] = token
            page = self._call(f"s3://{bucket}/{prefix}", self.client.list_objects_v2, **args)
            for d in page.get("CommonPrefixes", []):
                out.append({"name": f"{bucket}/{d['Prefix'].rstrip('/')}", "size": 0, "type": "directory"})
            for o in page.get("Contents", []):
                out.append({"name": f"{bucket}/{o['Key']}", "size": o["Size"], "type": "file"})
            if not page.get("IsTruncated"):
                break
            token = page.get("NextContinuationToken")
        if not out and key:
            info = self.info(path)  # a file, or FileNotFoundError
            out = [info]
        return out if detail else [o["name"] for o in out]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        bucket, key = self.split(path)
        if not key:
            return {"name": bucket, "size": 0, "type": "directory"}
        try:
            head = self.client.head_object(Bucket=bucket, Key=key)
            return {"name": f"{bucket}/{key}", "size": head["ContentLength"], "Size": head["ContentLength"], "type": "file"}
        except _s3_errors() as exc:
            error = _os_error(exc, f"s3://{bucket}/{key}")
            if not isinstance(error, FileNotFoundError):
                raise error from exc
        page = self._call(
            f"s3://{bucket}/{key}", self.client.list_objects_v2, Bucket=bucket, Prefix=f"{key.rstrip('/')}/", MaxKeys=1
        )
        if page.get("KeyCount", 0) or page.get("Contents"):
            return {"name": f"{bucket}/{key.rstrip('/')}", "size": 0, "type": "directory"}
        raise FileNotFoundError(2, f"no such object: s3://{bucket}/{key}")

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SignedS3File:
        return SignedS3File(self, path, mode, block_size=block_size, autocommit=autocommit, cache_options=cache_options, **kwargs)

    def rm_file(self, path: str) -> None:
        bucket, key = self.split(path)
        self._call(f"s3://{bucket}/{key}", self.client.delete_object, Bucket=bucket, Key=key)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def rm(self, path: str | list[str], recursive: bool = False, maxdepth: int | None = None) -> None:
        paths = path if isinstance(path, list) else [path]
        for p in paths:
            if recursive and self.isdir(p):
                for f in self.find(p):
                    self.rm_file(f)
            else:
                if not self.exists(p):
                    raise FileNotFoundError(2, f"no such object: s3://{self._strip_protocol(p)}")
                self.rm_file(p)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Object stores have no directories."""

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Object stores have no directories."""

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        with self.open(path, "rb") as f:
            f.seek(start or 0)
            return bytes(f.read(None if end is None else end - (start or 0)))

    def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        with self.open(path, "wb") as f:
            f.write(value)

    def _put_stream(self, path: str, data: io.BytesIO) -> None:  # pragma: no cover - fsspec API surface
        self.pipe_file(path, data.getvalue())


def make_signed_client(properties: Properties) -> Any:
    """A boto3 S3 client that never signs by itself: pyiceberg's ``S3V4RestSigner`` asks the catalog
    to sign each request (the same hook and the same ``UNSIGNED`` setting pyiceberg gives s3fs)."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    checksum = properties.get(CHECKSUM_PROPERTY, "when_required")
    virtual = property_as_bool(properties, S3_FORCE_VIRTUAL_ADDRESSING, False)
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=properties.get(S3_ENDPOINT),
        region_name=properties.get(S3_REGION) or "us-east-1",
        config=Config(
            signature_version=UNSIGNED,
            s3={"addressing_style": "virtual" if virtual else "path"},
            request_checksum_calculation=checksum,
            response_checksum_validation=checksum,
            retries={"max_attempts": 3, "mode": "standard"},
        ),
    )
    client.meta.events.register_last("before-sign.s3", S3V4RestSigner(properties), unique_id="trident-remote-signer")
    return client


def remote_signing(properties: Properties) -> bool:
    """Whether these (table FileIO) properties say the catalog signs this table's S3 requests."""
    return property_as_bool(properties, REMOTE_SIGNING_ENABLED, False) or bool(properties.get("s3.signer"))


def _signed_s3(properties: Properties) -> AbstractFileSystem:
    if not remote_signing(properties):
        # Never send unsigned requests: a table config without a signer is a catalog that does not sign.
        raise PermissionError(
            "remote signing is not enabled for this table (no s3.remote-signing-enabled / s3.signer in the "
            "catalog's table config)"
        )
    return SignedS3FileSystem(properties)


class SignedS3FileIO(FsspecFileIOBase):
    """pyiceberg's ``FsspecFileIO`` with the boto3 signing filesystem for ``s3://`` locations."""

    def __init__(self, properties: Properties) -> None:
        super().__init__(properties)
        for scheme in SignedS3FileSystem.protocol:
            register_fsspec_scheme(self, scheme, _signed_s3)
