-- Write-audit-publish: a transaction can end 'staged' (its snapshot is on an audit branch, readers
-- do not see it) and later become 'committed' (published) or 'rejected' (discarded).
ALTER TABLE trident_ledger DROP CONSTRAINT IF EXISTS trident_ledger_status_check;
ALTER TABLE trident_ledger ADD CONSTRAINT trident_ledger_status_check
    CHECK (status IN ('open', 'committed', 'aborted', 'staged', 'rejected'));
-- The dataset's published snapshot when the version was staged: publish refuses if main moved.
ALTER TABLE trident_ledger ADD COLUMN IF NOT EXISTS base_snapshot_id bigint;
ALTER TABLE trident_ledger ADD COLUMN IF NOT EXISTS staged_at timestamptz;
CREATE INDEX IF NOT EXISTS trident_ledger_staged ON trident_ledger (dataset_id) WHERE status = 'staged';
