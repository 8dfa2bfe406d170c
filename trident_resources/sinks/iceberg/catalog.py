"""Which Iceberg catalog the trident talks to, expressed as pyiceberg catalog properties.

Both choices go through ``pyiceberg.catalog.load_catalog(**props)``: the embedded default is a SQL
catalog kept in the control-plane Postgres; production is a REST catalog (Lakekeeper), which may
vend per-table storage credentials.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError
from pyiceberg.typedef import Identifier

from ...errors import StorageUnavailableError
from ...settings import TridentSettings

CATALOG_NAME = "trident"


def sqlalchemy_url(dsn: str) -> str:
    """SQLAlchemy URL for a libpq URI DSN, on the psycopg 3 driver we already ship."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("the control-plane DSN must be a postgresql:// URI")
    return urlunsplit(("postgresql+psycopg", *parts[1:]))


def catalog_properties(settings: TridentSettings, dsn: str) -> dict[str, str]:
    props: dict[str, str] = {}
    if settings.catalog_uri:
        props |= {"type": "rest", "uri": settings.catalog_uri}
        if settings.catalog_warehouse:
            props["warehouse"] = settings.catalog_warehouse
        if settings.catalog_token:
            props["token"] = settings.catalog_token.get_secret_value()
        if settings.catalog_credential:
            props["credential"] = settings.catalog_credential.get_secret_value()
        if settings.catalog_scope:
            props["scope"] = settings.catalog_scope
        if settings.catalog_vended_credentials:
            props["header.X-Iceberg-Access-Delegation"] = "vended-credentials"
    else:
        props |= {
            "type": "sql",
            "uri": sqlalchemy_url(dsn),
            "warehouse": settings.warehouse,
            "init_catalog_tables": "false",  # the control-plane migration owns those tables
            "pool_pre_ping": "true",
        }
    props |= settings.s3_properties()
    props |= settings.catalog_properties
    return props


def open_catalog(settings: TridentSettings, dsn: str) -> Catalog:
    """Open the catalog; one that cannot be reached is StorageUnavailableError, as promised.

    pyiceberg's REST catalog fetches its config while opening, so an unreachable URI raised a raw
    ``requests.ConnectionError`` (an OSError) from the Trident constructor. The message names the
    URI (never the token or credential, which are not part of it) and chains the cause.
    """
    try:
        return load_catalog(CATALOG_NAME, **catalog_properties(settings, dsn))
    except (OSError, ConnectionError) as exc:
        where = settings.catalog_uri or "the SQL catalog in the control-plane Postgres"
        raise StorageUnavailableError(
            f"Iceberg catalog unavailable at {where}: {type(exc).__name__}; check TRIDENT_CATALOG_URI "
            "and that the catalog is running"
        ) from exc


def ensure_namespace(catalog: Catalog, namespace: Identifier) -> None:
    """Create ``namespace`` unless it exists; losing a race to another creator is success.

    pyiceberg checks then inserts. Concurrent first writes into one new key folder (Dagster runs a
    group's assets at once) race between the two: the REST catalog answers 409, which pyiceberg
    maps to NamespaceAlreadyExistsError, but the SQL catalog's insert fails on its unique key
    with a raw sqlalchemy IntegrityError. Whatever the error, if the namespace exists afterwards
    the goal is met; only when it still does not is the error real.
    """
    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        return
    except Exception as exc:  # any error: whether the namespace exists now decides
        try:
            exists = catalog.namespace_exists(namespace)
        except Exception:  # noqa: BLE001 - unreachable: report the first error, not the check's
            raise exc from None
        if not exists:
            raise
