-- Cleanup that could not run yet (issue 8.10). An aborted transaction's storage leftovers (data
-- files it wrote, incomplete multipart uploads) are removed right after the abort; when storage is
-- unreachable then, the ledger row keeps `cleanup_pending` and `reconcile` / `maintain` retry it
-- until it succeeds. The flag is set together with `aborted` and cleared once the removal has
-- succeeded, so a process dying in between leaves it set, never a silent leak.
ALTER TABLE trident_ledger ADD COLUMN IF NOT EXISTS cleanup_pending boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS trident_ledger_cleanup_pending ON trident_ledger (dataset_id) WHERE cleanup_pending;
