-- Partitioned datasets (issue 10): writers of DIFFERENT partitions of one dataset run at the same
-- time, each with its own open ledger row. They are serialised by advisory locks instead (a shared
-- dataset lock plus one lock per partition while writing, the dataset's commit lock around COMMIT),
-- so the "one open transaction per dataset" index becomes a plain lookup index.
DROP INDEX IF EXISTS trident_ledger_one_open_per_dataset;
CREATE INDEX IF NOT EXISTS trident_ledger_open_by_dataset ON trident_ledger (dataset_id) WHERE status = 'open';
