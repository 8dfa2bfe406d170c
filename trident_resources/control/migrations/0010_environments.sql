-- Environments (docs/environments.md): a named copy-on-write view of every dataset of a workspace.
-- An environment's version of a dataset lives on the Iceberg branch `trident_env_<name>` of the
-- dataset's table, made from the published snapshot on the environment's first write (a ref, no
-- file copied). Production never reads these rows: its records stay in trident_datasets.
CREATE TABLE IF NOT EXISTS trident_environments (
    workspace     text NOT NULL,
    name          text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz NOT NULL DEFAULT now(),  -- its last write (what `maintain` ages it by)
    PRIMARY KEY (workspace, name)
);

-- One row per dataset an environment wrote: where it forked from production (the published
-- transaction, snapshot, row count and next __row_index at its first write; all NULL for a
-- dataset born in the environment) and the environment's current version (what its readers
-- read instead of trident_datasets' record). Written in the same Postgres transaction as the
-- environment write's ledger COMMIT.
CREATE TABLE IF NOT EXISTS trident_env_heads (
    workspace            text NOT NULL,
    environment          text NOT NULL,
    dataset_id           uuid NOT NULL REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    born_in_env          boolean NOT NULL,
    fork_txn_id          uuid,
    fork_snapshot_id     bigint,
    fork_row_count       bigint,
    fork_next_row_index  bigint,
    row_count            bigint NOT NULL,
    next_row_index       bigint NOT NULL,
    schema               jsonb,
    schema_version       integer NOT NULL,
    snapshot_id          bigint,
    last_txn_id          uuid NOT NULL,
    committed_at         timestamptz,
    -- the environment's watermarks of the dataset ("<source dataset id>|<output partition key>" ->
    -- [watermark, source txn id]): production's at the fork, then what its writes recorded
    watermarks           jsonb NOT NULL DEFAULT '{}',
    -- promoted: its version is production's now (the promotion's group published it), so the
    -- environment's readers read production's record again; the row and its branch stay until the
    -- environment is dropped (a promotion then costs its group publish only)
    promoted_at          timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, environment, dataset_id),
    FOREIGN KEY (workspace, environment) REFERENCES trident_environments (workspace, name) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS trident_env_heads_by_dataset ON trident_env_heads (dataset_id);

