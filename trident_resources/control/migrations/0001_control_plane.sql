-- The control plane: metadata and governance for every dataset, whatever its sink.

CREATE TABLE IF NOT EXISTS trident_datasets (
    dataset_id        uuid PRIMARY KEY,
    workspace         text NOT NULL,
    key               text NOT NULL,
    sink              text NOT NULL CHECK (sink IN ('iceberg_native', 'pg')),
    iceberg_identifier text,
    row_count         bigint NOT NULL DEFAULT 0,
    next_row_index    bigint NOT NULL DEFAULT 0,
    schema            jsonb,
    schema_version    integer NOT NULL DEFAULT 0,
    snapshot_id       bigint,
    last_txn_id       uuid,
    committed_at      timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace, key)
);

CREATE TABLE IF NOT EXISTS trident_ledger (
    txn_id          uuid PRIMARY KEY,
    dataset_id      uuid NOT NULL REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    status          text NOT NULL CHECK (status IN ('open', 'committed', 'aborted')),
    mode            text NOT NULL,
    writer          text NOT NULL,
    sink            text NOT NULL,
    requested_sink  text,
    clamped         boolean NOT NULL DEFAULT false,
    route_reason    text,
    started_at      timestamptz NOT NULL,
    committed_at    timestamptz,
    ended_at        timestamptz,
    rows_written    bigint,
    row_count       bigint,
    skipped         bigint,
    preserved       bigint,
    snapshot_id     bigint,
    schema_version  integer,
    source_refs     jsonb NOT NULL DEFAULT '[]'::jsonb,
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    error           text,
    location        text,    -- where the transaction writes files, for cleanup after a crash
    pid             integer,
    host            text
);

-- One open transaction per dataset: the serialising rule of INTENT.
CREATE UNIQUE INDEX IF NOT EXISTS trident_ledger_one_open_per_dataset
    ON trident_ledger (dataset_id) WHERE status = 'open';
CREATE INDEX IF NOT EXISTS trident_ledger_by_dataset ON trident_ledger (dataset_id, started_at DESC);

CREATE TABLE IF NOT EXISTS trident_schema_versions (
    dataset_id  uuid NOT NULL REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    version     integer NOT NULL,
    schema      jsonb NOT NULL,
    txn_id      uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dataset_id, version)
);

CREATE TABLE IF NOT EXISTS trident_sync_log (
    id            bigserial PRIMARY KEY,
    dataset_id    uuid NOT NULL REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    txn_id        uuid NOT NULL,
    sink          text NOT NULL,
    snapshot_id   bigint,
    has_identity  boolean NOT NULL,
    rows_written  bigint NOT NULL,
    row_count     bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS trident_provenance (
    dataset_id  uuid PRIMARY KEY REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    provenance  jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS trident_writer_flags (
    workspace   text NOT NULL,
    writer      text NOT NULL,
    sink        text NOT NULL CHECK (sink IN ('iceberg_native', 'pg')),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, writer)
);

CREATE TABLE IF NOT EXISTS trident_dataset_pins (
    workspace   text NOT NULL,
    key         text NOT NULL,
    sink        text NOT NULL CHECK (sink IN ('iceberg_native', 'pg')),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, key)
);

-- Delta strategies: how far an output has consumed each source (source commit's committed_at).
CREATE TABLE IF NOT EXISTS trident_watermarks (
    output_dataset_id  uuid NOT NULL REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    source_dataset_id  uuid NOT NULL REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    watermark          timestamptz NOT NULL,
    source_txn_id      uuid,
    txn_id             uuid NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (output_dataset_id, source_dataset_id)
);

-- The embedded default keeps the Iceberg SQL catalog in this same Postgres. pyiceberg would create
-- these on first use, but not safely from two processes at once, so the migration owns them.
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name               varchar(255) NOT NULL,
    table_namespace            varchar(255) NOT NULL,
    table_name                 varchar(255) NOT NULL,
    metadata_location          varchar(1000),
    previous_metadata_location varchar(1000),
    iceberg_type               varchar(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);

CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name    varchar(255) NOT NULL,
    namespace       varchar(255) NOT NULL,
    property_key    varchar(255) NOT NULL,
    property_value  varchar(1000) NOT NULL,
    PRIMARY KEY (catalog_name, namespace, property_key)
);
