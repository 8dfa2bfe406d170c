-- The pg sink: dataset rows as jsonb in the control-plane Postgres (the legacy store, and where
-- dataset.manifest lives by design). Identity columns are real columns; user columns are jsonb,
-- cast back to their Arrow types through the schema recorded with each commit.

-- Rows of every pg dataset. `gen` is a generation: a replace writes a new one (and the old one is
-- purged by the next write), so undoing a replace is cheap and never rewrites the old rows.
-- No foreign key to trident_datasets: a per-row key check would slow bulk COPY; PgSink.drop deletes.
CREATE TABLE IF NOT EXISTS trident_rows (
    dataset_id  uuid NOT NULL,
    gen         bigint NOT NULL,
    row_id      uuid NOT NULL,
    row_index   bigint NOT NULL,
    created_at  timestamptz NOT NULL,
    txn_id      uuid NOT NULL,          -- the transaction that wrote this version of the row
    data        jsonb NOT NULL,
    PRIMARY KEY (dataset_id, gen, row_id)
);
CREATE INDEX IF NOT EXISTS trident_rows_scan ON trident_rows (dataset_id, gen, row_index);

-- Row versions a keyed write removed from the current generation, kept until the next write of the
-- dataset so that a write whose ledger COMMIT failed can be undone exactly.
CREATE TABLE IF NOT EXISTS trident_rows_undo (
    undo_txn_id uuid NOT NULL,
    dataset_id  uuid NOT NULL,
    gen         bigint NOT NULL,
    row_id      uuid NOT NULL,
    row_index   bigint NOT NULL,
    created_at  timestamptz NOT NULL,
    txn_id      uuid NOT NULL,
    data        jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS trident_rows_undo_by_txn ON trident_rows_undo (undo_txn_id);

-- One row per pg-sink write, committed in the same Postgres transaction as the rows: the sink's
-- "snapshot" (seq), its generation, the Arrow schema to decode jsonb with, and the outcome, so a
-- crashed writer's transaction can be found and rolled forward by the reconciler.
CREATE TABLE IF NOT EXISTS trident_pg_commits (
    seq           bigserial PRIMARY KEY,
    dataset_id    uuid NOT NULL REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    txn_id        uuid NOT NULL UNIQUE,
    gen           bigint NOT NULL,
    arrow_schema  bytea NOT NULL,
    outcome       jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS trident_pg_commits_latest ON trident_pg_commits (dataset_id, seq DESC);
