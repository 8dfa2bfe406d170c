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

-- The blocks of (dataset_id, gen) that hold a row index of `changed` (a transition table).
-- One aggregate pass over the changed rows finds the span per generation; only blocks inside a
-- span are then checked row by row (a generation purge deletes its blocks first: none are left).
CREATE OR REPLACE FUNCTION trident_row_blocks_forget_old() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH span AS (
        SELECT dataset_id, gen, min(row_index) AS lo, max(row_index) AS hi FROM trident_rows_old GROUP BY 1, 2
    )
    DELETE FROM trident_row_blocks b USING span s
    WHERE b.dataset_id = s.dataset_id AND b.gen = s.gen
      AND b.first_row_index <= s.hi AND b.last_row_index >= s.lo
      AND EXISTS (SELECT 1 FROM trident_rows_old o
                  WHERE o.dataset_id = b.dataset_id AND o.gen = b.gen
                    AND o.row_index BETWEEN b.first_row_index AND b.last_row_index);
    IF TG_OP = 'UPDATE' THEN  -- a row moved (row_index, gen) INTO a block's span also breaks it
        WITH span AS (
            SELECT dataset_id, gen, min(row_index) AS lo, max(row_index) AS hi FROM trident_rows_new GROUP BY 1, 2
        )
        DELETE FROM trident_row_blocks b USING span s
        WHERE b.dataset_id = s.dataset_id AND b.gen = s.gen
          AND b.first_row_index <= s.hi AND b.last_row_index >= s.lo
          AND EXISTS (SELECT 1 FROM trident_rows_new o
                      WHERE o.dataset_id = b.dataset_id AND o.gen = b.gen
                        AND o.row_index BETWEEN b.first_row_index AND b.last_row_index);
    END IF;
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
    FOR EACH STATEMENT EXECUTE FUNCTION trident_row_blocks_forget_old();
DROP TRIGGER IF EXISTS trident_rows_updated ON trident_rows;
CREATE TRIGGER trident_rows_updated AFTER UPDATE ON trident_rows
    REFERENCING OLD TABLE AS trident_rows_old NEW TABLE AS trident_rows_new
    FOR EACH STATEMENT EXECUTE FUNCTION trident_row_blocks_forget_old();
DROP TRIGGER IF EXISTS trident_rows_truncated ON trident_rows;
CREATE TRIGGER trident_rows_truncated AFTER TRUNCATE ON trident_rows
    FOR EACH STATEMENT EXECUTE FUNCTION trident_row_blocks_forget_all();
