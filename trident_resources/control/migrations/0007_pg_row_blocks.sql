-- A read cache of the pg sink (issue 12.3): compact binary blocks next to the jsonb rows, which
-- stay the truth. Postgres renders jsonb members at ~0.035 s of server CPU per member per 200k
-- rows however they are asked for, so a full read of a wide dataset cannot be fast from jsonb.
--
-- A block is one write batch whose rows had contiguous ascending __row_index (replace / append
-- writes), stored as an Arrow IPC stream (zstd buffers) of its identity and user columns, written
-- in the SAME Postgres transaction as its rows (a killed writer leaves neither).
--
-- Invariant: every row of generation `gen` whose row_index lies in [first_row_index,
-- last_row_index] is exactly that block's row. Trident keeps it (new rows get indexes above the
-- max; a replaced or removed row version is DELETEd, which fires the triggers below), and the
-- triggers keep it against any DELETE, UPDATE or TRUNCATE of trident_rows (by hand too): every
-- block overlapping a changed row is dropped, and readers read those rows from jsonb.
CREATE TABLE IF NOT EXISTS trident_row_blocks (
    dataset_id       uuid NOT NULL,
    gen              bigint NOT NULL,
    first_row_index  bigint NOT NULL,
    last_row_index   bigint NOT NULL,
    txn_id           uuid NOT NULL,     -- the transaction that wrote the block (and its rows)
    n_rows           bigint NOT NULL,
    ipc              bytea NOT NULL,
    PRIMARY KEY (dataset_id, gen, first_row_index),
    CHECK (last_row_index - first_row_index + 1 = n_rows)
);
-- Already zstd-compressed: EXTERNAL stores it out of line without a (wasted) pglz attempt
-- (measured on a 2.4 MB lineitem block: insert 15 ms vs 62 ms MAIN, 73 ms EXTENDED; same size and read time).
ALTER TABLE trident_row_blocks ALTER COLUMN ipc SET STORAGE EXTERNAL;

-- Drop the blocks of (dataset_id, gen) that hold a row index of the changed rows (a transition
-- table). Blocks never overlap, so each changed row belongs to the block with the greatest first
-- index at or below it, if that block reaches it: one sort of the changed rows together with the
-- candidate blocks (a running max of block starts) tags every row with its block, O((rows +
-- blocks) log), where testing each block against the changed rows would be O(rows x blocks).
-- Candidates are the blocks inside the changed rows' span per generation; when there are none
-- (a generation purge deletes its blocks first) the sort is skipped.
-- An UPDATE breaks the blocks of its old rows and of its new ones (a row moved (row_index, gen)
-- INTO a block's span), so it tags the rows of both transition tables; the statement is built per
-- operation because a DELETE trigger has no new table to name (PL/pgSQL's EXECUTE sees both).
CREATE OR REPLACE FUNCTION trident_row_blocks_forget() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed text := 'SELECT dataset_id, gen, row_index FROM trident_rows_old';
BEGIN
    IF TG_OP = 'UPDATE' THEN
        changed := changed || ' UNION ALL SELECT dataset_id, gen, row_index FROM trident_rows_new';
    END IF;
    EXECUTE format($sql$
        WITH changed AS (%s), span AS (
            SELECT dataset_id, gen, min(row_index) AS lo, max(row_index) AS hi FROM changed GROUP BY 1, 2
        ), candidate AS MATERIALIZED (
            SELECT b.dataset_id, b.gen, b.first_row_index, b.last_row_index
            FROM trident_row_blocks b JOIN span s ON b.dataset_id = s.dataset_id AND b.gen = s.gen
            WHERE b.first_row_index <= s.hi AND b.last_row_index >= s.lo
        ), point AS (
            SELECT dataset_id, gen, row_index AS pos, 1 AS kind FROM changed
            WHERE EXISTS (SELECT 1 FROM candidate)
            UNION ALL
            SELECT dataset_id, gen, first_row_index, 0 FROM candidate
        ), owned AS (
            SELECT dataset_id, gen, pos, kind,
                   max(CASE WHEN kind = 0 THEN pos END)
                       OVER (PARTITION BY dataset_id, gen ORDER BY pos, kind ROWS UNBOUNDED PRECEDING) AS first
            FROM point
        ), hit AS (
            SELECT dataset_id, gen, first, min(pos) AS pos FROM owned WHERE kind = 1 AND first IS NOT NULL GROUP BY 1, 2, 3
        )
        DELETE FROM trident_row_blocks b USING hit h
        WHERE b.dataset_id = h.dataset_id AND b.gen = h.gen AND b.first_row_index = h.first AND h.pos <= b.last_row_index
    $sql$, changed);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION trident_row_blocks_forget_all() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE trident_row_blocks;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS trident_rows_deleted ON trident_rows;
CREATE TRIGGER trident_rows_deleted AFTER DELETE ON trident_rows
    REFERENCING OLD TABLE AS trident_rows_old
    FOR EACH STATEMENT EXECUTE FUNCTION trident_row_blocks_forget();
DROP TRIGGER IF EXISTS trident_rows_updated ON trident_rows;
CREATE TRIGGER trident_rows_updated AFTER UPDATE ON trident_rows
    REFERENCING OLD TABLE AS trident_rows_old NEW TABLE AS trident_rows_new
    FOR EACH STATEMENT EXECUTE FUNCTION trident_row_blocks_forget();
DROP TRIGGER IF EXISTS trident_rows_truncated ON trident_rows;
CREATE TRIGGER trident_rows_truncated AFTER TRUNCATE ON trident_rows
    FOR EACH STATEMENT EXECUTE FUNCTION trident_row_blocks_forget_all();
