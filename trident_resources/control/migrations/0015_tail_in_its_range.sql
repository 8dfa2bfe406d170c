-- The oldest unflushed block of a dataset's inlined tail, found in the dataset's own index range.
--
-- Every inlined write asks for it (the tail's rows and age, for flush-when-due), as did 0012's
-- "WHERE dataset_id = p_ds AND flushed_by IS NULL ORDER BY seq LIMIT 1". A plpgsql function's
-- statements, like psycopg's prepared ones, switch to a generic plan after five calls, and for
-- that one Postgres may pick the primary key (seq order) and filter on the dataset: it then walks
-- every block of every dataset older than this one's oldest, flushed ones included. Measured: an
-- inlined commit grew from 0.6 to 2.7 ms of server time with 6,700 blocks of other datasets.
-- The row comparison below starts at the dataset's first block after its last flush
-- (inline_flushed: every block up to it is flushed) in the (dataset_id, seq) index, and no other
-- index gives that order, so any plan reads from there.
CREATE OR REPLACE FUNCTION trident_oldest_unflushed(p_ds uuid)
RETURNS TABLE (first_row_index bigint, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT o.first_row_index, o.created_at FROM trident_datasets d CROSS JOIN LATERAL (
        SELECT t.first_row_index, t.created_at FROM trident_inline_tail t
        WHERE (t.dataset_id, t.seq) > (p_ds, d.inline_flushed) AND t.dataset_id <= p_ds AND t.flushed_by IS NULL
        ORDER BY t.dataset_id, t.seq LIMIT 1) o
    WHERE d.dataset_id = p_ds
$$;

-- trident_inline_commit (0014) on it; otherwise unchanged.
CREATE OR REPLACE FUNCTION trident_inline_commit(
    p_txn uuid, p_ds uuid, p_mode text, p_writer text, p_sink text, p_requested text, p_clamped boolean,
    p_reason text, p_tau timestamptz, p_n bigint, p_rows bigint, p_next bigint, p_snapshot bigint,
    p_version integer, p_refs jsonb, p_meta jsonb, p_pid integer, p_host text, p_first bigint, p_ipc bytea,
    p_expect_next bigint, p_expect_last uuid)
RETURNS TABLE (outcome text, committed_at timestamptz, ended_at timestamptz, block_seq bigint,
    tail_rows bigint, tail_age_s float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_gate text := trident_small_commit_gate(p_ds, p_sink, p_snapshot, p_version, p_expect_next, p_expect_last);
    v_at timestamptz;
    v_seq bigint;
BEGIN
    IF v_gate = 'ok' THEN
        v_at := trident_small_commit_ledger(p_txn, p_ds, p_mode, p_writer, p_sink, p_requested, p_clamped, p_reason,
            p_tau, p_n, p_rows, p_snapshot, p_version, p_refs, p_meta, p_pid, p_host);
        v_gate := CASE WHEN v_at IS NULL THEN 'exists' ELSE 'ok' END;
    END IF;
    IF v_gate <> 'ok' THEN
        RETURN QUERY SELECT v_gate, NULL::timestamptz, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::float8;
        RETURN;
    END IF;
    IF p_ipc IS NOT NULL THEN
        INSERT INTO trident_inline_tail (dataset_id, txn_id, first_row_index, n_rows, ipc)
        VALUES (p_ds, p_txn, p_first, p_n, p_ipc) RETURNING seq INTO v_seq;
    END IF;
    PERFORM trident_small_commit_stats(p_txn, p_ds, p_sink, v_at, p_n, p_rows, p_next, p_snapshot, v_seq);
    -- the tail from its oldest unflushed block (queries.py, _TAIL_FROM_OLDEST: the tail's rows are
    -- the dataset's last ones), for the writer's flush-when-due
    RETURN QUERY SELECT 'committed'::text, v_at, v_at, v_seq,
        coalesce(GREATEST(p_next - o.first_row_index, 1), 0)::bigint, extract(epoch FROM now() - o.created_at)::float8
    FROM (SELECT 1) one LEFT JOIN trident_oldest_unflushed(p_ds) o ON true;
END
$$;
