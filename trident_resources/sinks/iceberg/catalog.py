"""Which Iceberg catalog the trident talks to, expressed as pyiceberg catalog properties.

Both choices go through ``pyiceberg.catalog.load_catalog(**props)``: the embedded default is a SQL
catalog kept in the control-plane Postgres; production is a REST catalog (Lakekeeper), which may
vend per-table storage credentials.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import ForbiddenError, NamespaceAlreadyExistsError, OAuthError, RESTError, UnauthorizedError
from pyiceberg.typedef import Identifier
from requests import RequestException

from ...core.errors import CatalogAuthenticationError, StorageUnavailableError
from ...core.pyiceberg_compat import RestCatalogWithExplicitDelegation, SqlCatalogReusingMetadata
from ...core.settings import TridentSettings
from . import credentials

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
        props |= {
            "py-catalog-impl": f"{RestCatalogWithExplicitDelegation.__module__}.{RestCatalogWithExplicitDelegation.__qualname__}",
            "uri": settings.catalog_uri,
        }
        if settings.catalog_warehouse:
            props["warehouse"] = settings.catalog_warehouse
        if settings.catalog_token:
            props["token"] = settings.catalog_token.get_secret_value()
        if settings.catalog_credential:
            props["credential"] = settings.catalog_credential.get_secret_value()
        # OAuth2 client credentials against an external identity provider (Lakekeeper serves no
        # token endpoint; pyiceberg's default is {uri}/v1/oauth/tokens).
        for key, value in (
            ("scope", settings.catalog_scope),
            ("oauth2-server-uri", settings.catalog_oauth2_server_uri),
            ("audience", settings.catalog_audience),
            ("resource", settings.catalog_resource),
        ):
            if value:
                props[key] = value
        props |= credentials.catalog_properties(settings)
    else:
        props |= {
            # pyiceberg's SQL catalog that reuses the metadata files it already parsed
            "py-catalog-impl": f"{SqlCatalogReusingMetadata.__module__}.{SqlCatalogReusingMetadata.__qualname__}",
            "uri": sqlalchemy_url(dsn),
            "warehouse": settings.warehouse,
            "init_catalog_tables": "false",  # the control-plane migration owns those tables
            "pool_pre_ping": "true",
        }
    props |= settings.s3_properties()
    props |= settings.catalog_properties
    return props


def open_catalog(settings: TridentSettings, dsn: str) -> Catalog:
    """The catalog, connected (a REST catalog fetches its config, and its OAuth2 token, here): a
    refused credential or an unreachable catalog is a named error at startup, not at first write."""
    if settings.s3_bucket or settings.catalog_uri:
        credentials.apply_checksum_policy(settings)
    try:
        return load_catalog(CATALOG_NAME, **catalog_properties(settings, dsn))
    except (OAuthError, UnauthorizedError, ForbiddenError) as exc:
        raise CatalogAuthenticationError(
            f"the Iceberg REST catalog at {settings.catalog_uri} refused Trident's credentials: {exc}. "
            "Check TRIDENT_CATALOG_CREDENTIAL/_TOKEN and, with an external identity provider, "
            "TRIDENT_CATALOG_OAUTH2_SERVER_URI, _SCOPE, _AUDIENCE, _RESOURCE"
        ) from exc
    except (RequestException, OSError, ConnectionError, RESTError) as exc:
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
        except Exception:
            raise exc from None
        if not exists:
            raise
