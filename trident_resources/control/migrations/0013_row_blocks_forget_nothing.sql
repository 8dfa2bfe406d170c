-- trident_row_blocks_forget (0007) returns at once when the statement changed no row: every pg-sink
-- write purges older generations first, usually deleting nothing, and the trigger's dynamic
-- statement was planned anyway (~6 ms, more than the whole of a small append's other work).
CREATE OR REPLACE FUNCTION trident_row_blocks_forget() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed text := 'SELECT dataset_id, gen, row_index FROM trident_rows_old';
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NOT EXISTS (SELECT 1 FROM trident_rows_old) AND NOT EXISTS (SELECT 1 FROM trident_rows_new) THEN
            RETURN NULL;
        END IF;
        changed := changed || ' UNION ALL SELECT dataset_id, gen, row_index FROM trident_rows_new';
    ELSIF NOT EXISTS (SELECT 1 FROM trident_rows_old) THEN
        RETURN NULL;
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
