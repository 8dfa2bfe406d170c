-- The inlined tail each dataset record names (read/tail.py): the blocks with
-- inline_flushed < seq <= inline_through. A reader resolves every dataset it reads in ONE
-- control-plane statement (t.sql, read_many); the record then pins the tail too, so the rows of
-- a dataset's tail are those of that same moment, not of the later instant its blocks are read.
--
-- A tail is always such a range: blocks are committed under the dataset's writer lock (seq in
-- commit order), and a flush marks every unflushed block up to the last it read.
-- inline_through: the newest block committed (set in the inlined write's COMMIT);
-- inline_flushed: the newest block a committed flush moved into Iceberg (set in its COMMIT).
ALTER TABLE trident_datasets ADD COLUMN IF NOT EXISTS inline_through bigint NOT NULL DEFAULT 0;
ALTER TABLE trident_datasets ADD COLUMN IF NOT EXISTS inline_flushed bigint NOT NULL DEFAULT 0;
UPDATE trident_datasets d SET
    inline_through = coalesce((SELECT max(t.seq) FROM trident_inline_tail t WHERE t.dataset_id = d.dataset_id), 0),
    inline_flushed = coalesce(
        (SELECT max(t.seq) FROM trident_inline_tail t WHERE t.dataset_id = d.dataset_id AND t.flushed_by IS NOT NULL), 0)
WHERE EXISTS (SELECT 1 FROM trident_inline_tail t WHERE t.dataset_id = d.dataset_id);
