"""Storage access for Iceberg tables: one explicit mode (``TRIDENT_S3_CREDENTIALS``), told to the
catalog and checked on every table the catalog hands out.

- ``static``: our own keys; NO ``X-Iceberg-Access-Delegation`` header (pyiceberg would send
  ``vended-credentials`` by default, see ``pyiceberg_compat.RestCatalogWithExplicitDelegation``).
- ``vended``: header ``vended-credentials``; each table's FileIO uses the keys from its load
  response, and is re-pointed at fresh ones (by reloading the table's config from the catalog)
  before they expire. Static keys are never sent, so a catalog that vends nothing fails here, by
  name, instead of writing with keys nobody meant to use.
- ``remote-signing``: header ``remote-signing``; FileIO ``signing.SignedS3FileIO``, which signs
  every S3 request through the catalog's signer endpoint and never sends an unsigned one.

Also here: the AWS SDK checksum policy, which must be in the environment before pyarrow builds its
first S3 client.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from pyiceberg.io import S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, S3_SESSION_TOKEN
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table
from pyiceberg.typedef import Properties
from pyiceberg.utils.properties import property_as_bool

from ...core.errors import StorageCredentialsError, TridentError
from ...core.pyiceberg_compat import ACCESS_DELEGATION_HEADER, fresh_pyarrow_filesystems
from ...core.settings import CredentialMode, TridentSettings
from .signing import CHECKSUM_PROPERTY, REMOTE_SIGNING_ENABLED, SignedS3FileIO

log = logging.getLogger("trident")

EXPIRES_AT_MS = "s3.session-token-expires-at-ms"
"""Where an Iceberg REST catalog (Lakekeeper included) says when vended S3 credentials expire."""

ASSUMED_LIFETIME_SECONDS = 3600.0
"""Vended credentials without an expiry are assumed to last this long (Lakekeeper's default
validity for R2 and STS credentials), counted from when they were loaded."""

DELEGATION: dict[CredentialMode, str | None] = {
    "static": None,
    "vended": "vended-credentials",
    "remote-signing": "remote-signing",
}

_S3_SCHEMES = ("s3://", "s3a://", "s3n://")


def catalog_properties(settings: TridentSettings) -> dict[str, str]:
    """REST catalog properties for the chosen mode: the delegation header exactly when it applies,
    the signing FileIO for remote signing, and the checksum policy for our own S3 clients."""
    props: dict[str, str] = {CHECKSUM_PROPERTY: settings.s3_checksum}
    header = DELEGATION[settings.s3_credentials]
    if header is not None:
        props[f"header.{ACCESS_DELEGATION_HEADER}"] = header
    if settings.s3_credentials == "remote-signing":
        props["py-io-impl"] = f"{SignedS3FileIO.__module__}.{SignedS3FileIO.__qualname__}"
    return props


def apply_checksum_policy(settings: TridentSettings) -> None:
    """Tell the AWS SDK inside pyarrow (and boto3) when to add request checksums and validate
    response ones. The C++ SDK reads ``AWS_REQUEST_CHECKSUM_CALCULATION`` /
    ``AWS_RESPONSE_CHECKSUM_VALIDATION`` when a client is configured, i.e. when pyarrow builds an
    ``S3FileSystem``; Trident builds those lazily, after this runs. ``WHEN_REQUIRED`` gives plain
    signed PUTs; the SDK default (``WHEN_SUPPORTED``) sends ``aws-chunked`` bodies with a
    ``x-amz-checksum-crc64nvme`` trailer, which some S3-compatible stores reject or mangle.
    The environment is per process: the last ``Trident`` opened decides for all of them."""
    value = settings.s3_checksum.upper()
    os.environ["AWS_REQUEST_CHECKSUM_CALCULATION"] = value
    os.environ["AWS_RESPONSE_CHECKSUM_VALIDATION"] = value


class VendedFileIO(PyArrowFileIO):
    """A table's ``PyArrowFileIO`` on vended credentials, re-pointed at fresh ones before they expire.

    Every file operation goes through ``fs_by_scheme``; when the credentials are within
    ``refresh_seconds`` of expiry it first reloads the table's config from the catalog and
    rebuilds the pyarrow filesystems. Writers holding a file open across that moment should finish
    it first (``DataFileWriter`` rolls its files when ``expiring()`` says so): an upload in flight
    keeps the filesystem, and so the credentials, it was opened with.
    """

    def __init__(self, properties: Properties, *, reload: Callable[[], Properties], refresh_seconds: float, what: str) -> None:
        super().__init__(properties)
        self._reload = reload
        self._refresh_seconds = refresh_seconds
        self._what = what
        self._lock = threading.Lock()
        self._filesystems = self.fs_by_scheme
        self._refresh_at = self._plan_refresh(properties)
        self.refreshes = 0
        self.fs_by_scheme = self._current_fs

    def _plan_refresh(self, properties: Properties) -> float:
        now = time.time()
        raw = properties.get(EXPIRES_AT_MS)
        expires = int(raw) / 1000 if raw else now + ASSUMED_LIFETIME_SECONDS
        at = expires - self._refresh_seconds
        return at if at > now else now + max(expires - now, 0) / 2

    def expiring(self) -> bool:
        """True when the next file operation will reload the credentials first."""
        return time.time() >= self._refresh_at

    def _current_fs(self, scheme: str, netloc: str | None = None) -> Any:
        if self.expiring():
            self._refresh()
        return self._filesystems(scheme, netloc)

    def _refresh(self) -> None:
        with self._lock:
            if not self.expiring():
                return  # another thread refreshed meanwhile
            try:
                properties = self._reload()
            except TridentError:
                raise
            except Exception as exc:
                raise StorageCredentialsError(
                    f"could not reload vended storage credentials for {self._what} from the catalog: {type(exc).__name__}: {exc}"
                ) from exc
            require_vended(properties, self._what)
            self.properties = dict(properties)
            self._filesystems = fresh_pyarrow_filesystems(self)
            self._refresh_at = self._plan_refresh(properties)
            self.refreshes += 1
            log.info("trident: reloaded vended storage credentials for %s", self._what)


def require_vended(properties: Properties, what: str) -> None:
    if not (properties.get(S3_ACCESS_KEY_ID) and properties.get(S3_SECRET_ACCESS_KEY)):
        raise StorageCredentialsError(
            f"TRIDENT_S3_CREDENTIALS=vended, but the catalog vended no storage credentials for {what} "
            "(no s3.access-key-id/s3.secret-access-key in the table's config or storage-credentials). "
            "Enable credential vending in the warehouse's storage profile (STS, or Lakekeeper's "
            "cloudflare-r2 credential for R2), or choose remote-signing or static"
        )
    if not properties.get(S3_SESSION_TOKEN):
        log.debug("trident: vended credentials for %s carry no session token", what)


def require_signer(table: Table, what: str) -> None:
    props = table.io.properties
    if not isinstance(table.io, SignedS3FileIO) or not (
        property_as_bool(props, REMOTE_SIGNING_ENABLED, False) or props.get("s3.signer")
    ):
        raise StorageCredentialsError(
            f"TRIDENT_S3_CREDENTIALS=remote-signing, but the catalog did not enable remote signing for {what} "
            "(no s3.remote-signing-enabled / s3.signer in the table's config). Enable remote signing in the "
            "warehouse's storage profile, or choose vended or static"
        )


class StorageAccess:
    """Applies the credential mode to each table the catalog hands out (``bind``)."""

    def __init__(self, settings: TridentSettings) -> None:
        self.mode: CredentialMode = settings.s3_credentials
        self.refresh_seconds = settings.s3_credential_refresh_seconds

    @property
    def refreshable_only(self) -> bool:
        """Vended credentials are refreshed by reloading the table, which a staged (not yet
        committed) table cannot be: in that mode a table is created before its first data."""
        return self.mode == "vended"

    def bind(self, table: Table, reload: Callable[[], Table] | None) -> Table:
        """Check that ``table`` got what the mode needs and, for vended credentials, give it a FileIO
        that refreshes them (``reload`` loads the table again). Fails fast, by name."""
        if self.mode == "static" or not table.metadata.location.startswith(_S3_SCHEMES):
            return table
        what = f"table {'.'.join(table.name())}"
        if self.mode == "remote-signing":
            require_signer(table, what)
            return table
        props = dict(table.io.properties)
        require_vended(props, what)
        if reload is None:
            return table
        table.io = VendedFileIO(
            props, reload=lambda: dict(reload().io.properties), refresh_seconds=self.refresh_seconds, what=what
        )
        return table
