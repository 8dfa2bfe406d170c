-- The pg sink's undo log by dataset. Every pg write purges its dataset's settled undo rows
-- ("DELETE ... WHERE dataset_id = $1", and the one-call append's probe of 0014), and the log had
-- only an index by undo transaction: each of those statements read the whole log, so one
-- dataset's big keyed write (its replaced rows kept until that dataset's next write) slowed
-- every other pg dataset's writes.
CREATE INDEX IF NOT EXISTS trident_rows_undo_by_dataset ON trident_rows_undo (dataset_id);
