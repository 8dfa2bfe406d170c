-- Transaction groups: several staged writes (of different datasets) that publish together. The
-- group row is the one thing a publish flips: every member's ledger row turns 'committed' and
-- every member dataset's current version moves in the same Postgres transaction as the group's
-- status, so a reader resolving versions from one control-plane snapshot sees all of a group or
-- none of it. The Iceberg refs follow after that commit; `ref_pending` marks a committed member
-- whose table's main has not been moved yet (the next writer of the dataset, or reconcile, moves it).
CREATE TABLE IF NOT EXISTS trident_txn_groups (
    group_id      uuid PRIMARY KEY,
    workspace     text NOT NULL,
    status        text NOT NULL CHECK (status IN ('open', 'published', 'aborted')),
    label         text,
    metadata      jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    error         text,
    pid           integer,
    host          text
);
CREATE INDEX IF NOT EXISTS trident_txn_groups_open ON trident_txn_groups (workspace) WHERE status = 'open';

ALTER TABLE trident_ledger ADD COLUMN IF NOT EXISTS group_id uuid REFERENCES trident_txn_groups (group_id);
-- what a staged member's COMMIT records that the ledger has no column for (schema, next row index):
-- a group publishes without opening any table
ALTER TABLE trident_ledger ADD COLUMN IF NOT EXISTS staged_outcome jsonb;
ALTER TABLE trident_ledger ADD COLUMN IF NOT EXISTS ref_pending boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS trident_ledger_by_group ON trident_ledger (group_id) WHERE group_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS trident_ledger_ref_pending ON trident_ledger (dataset_id) WHERE ref_pending;
