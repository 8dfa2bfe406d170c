-- The inlined tail of iceberg_native datasets: small appends committed into Postgres, in the SAME
-- Postgres transaction as their ledger COMMIT, with no Iceberg commit and no file; a flush moves
-- them into ONE Iceberg snapshot later.
--
-- One row per inlined commit: its rows, already stamped with their identity, as one Arrow IPC
-- stream (zstd buffers; the pg sink's row-block encoding). `seq` orders the commits.
--
-- Visibility: a block is part of the dataset's current version while `flushed_by` is NULL.
-- The flush transaction sets `flushed_by` to its txn id in its own ledger COMMIT (or the
-- reconciler's roll-forward of it), i.e. in the same Postgres transaction that makes its Iceberg
-- snapshot the dataset's recorded one; readers read the recorded snapshot and the unflushed
-- blocks in ONE query, so a flush killed between its Iceberg commit and its ledger COMMIT shows
-- every row exactly once. Flushed blocks stay for time travel to versions before the flush, and
-- `maintain` deletes them with the snapshots of that age.
CREATE TABLE IF NOT EXISTS trident_inline_tail (
    seq              bigserial PRIMARY KEY,
    dataset_id       uuid NOT NULL REFERENCES trident_datasets (dataset_id) ON DELETE CASCADE,
    txn_id           uuid NOT NULL,     -- the inlined commit that wrote these rows
    first_row_index  bigint NOT NULL,
    n_rows           bigint NOT NULL,
    flushed_by       uuid,              -- the transaction that moved them into Iceberg (NULL: still here)
    created_at       timestamptz NOT NULL DEFAULT now(),  -- when inlined (a flush by age goes by the oldest)
    ipc              bytea NOT NULL
);
ALTER TABLE trident_inline_tail ALTER COLUMN ipc SET STORAGE EXTERNAL;
CREATE INDEX IF NOT EXISTS trident_inline_tail_live ON trident_inline_tail (dataset_id, seq) WHERE flushed_by IS NULL;
CREATE INDEX IF NOT EXISTS trident_inline_tail_by_dataset ON trident_inline_tail (dataset_id, seq);
