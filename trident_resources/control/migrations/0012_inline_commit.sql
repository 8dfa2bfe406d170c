-- An inlined write (transaction/inline.py) as ONE call, the whole of a small append's round trips:
-- the dataset's writer lock (transaction-level here, so the commit itself releases it), the check
-- that the record the writer stamped its rows from is still the dataset's (compare-and-set on
-- next_row_index, last_txn_id, snapshot, schema version and sink: any other write moves one of
-- them), the ledger row born
-- committed, the rows, the dataset's stats and the sync log.
--
-- Why a function and not one statement: a statement reads with the snapshot of its start, which
-- may predate the lock it takes; a (volatile) function's statements each read with a fresh
-- snapshot, so after the lock every check sees what the lock's earlier holders committed. A
-- writer holding the lock at session level (any other write, a flush) makes the call answer
-- 'busy'; the same session's call (a write that already holds it) proceeds.
--
-- outcome: committed | busy (another writer holds the lock) | stale (the dataset moved since
-- the record was read: read it again) | waiting (an open, staged or ref-pending transaction: the
-- writer takes the normal door, which settles or respects it) | exists (the txn id is taken).
CREATE OR REPLACE FUNCTION trident_inline_commit(
    p_txn uuid, p_ds uuid, p_mode text, p_writer text, p_sink text, p_requested text, p_clamped boolean,
    p_reason text, p_tau timestamptz, p_n bigint, p_rows bigint, p_next bigint, p_snapshot bigint,
    p_version integer, p_refs jsonb, p_meta jsonb, p_pid integer, p_host text, p_first bigint, p_ipc bytea,
    p_expect_next bigint, p_expect_last uuid)
RETURNS TABLE (outcome text, committed_at timestamptz, ended_at timestamptz, block_seq bigint,
    tail_rows bigint, tail_age_s float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_at timestamptz;
    v_seq bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended(p_ds::text, 7)) THEN
        RETURN QUERY SELECT 'busy'::text, NULL::timestamptz, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::float8;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM trident_datasets d WHERE d.dataset_id = p_ds AND d.next_row_index = p_expect_next
            AND d.last_txn_id IS NOT DISTINCT FROM p_expect_last AND d.snapshot_id IS NOT DISTINCT FROM p_snapshot
            AND d.schema_version IS NOT DISTINCT FROM p_version AND d.sink = p_sink) THEN
        RETURN QUERY SELECT 'stale'::text, NULL::timestamptz, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::float8;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM trident_ledger l WHERE l.dataset_id = p_ds AND l.status = 'open')
            OR EXISTS (SELECT 1 FROM trident_ledger l WHERE l.dataset_id = p_ds AND l.status = 'staged')
            OR EXISTS (SELECT 1 FROM trident_ledger l WHERE l.dataset_id = p_ds AND l.ref_pending) THEN
        RETURN QUERY SELECT 'waiting'::text, NULL::timestamptz, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::float8;
        RETURN;
    END IF;
    -- committed_at: this clock at COMMIT, never before tau (taken by the writer just before)
    v_at := GREATEST(date_trunc('microseconds', clock_timestamp()), p_tau);
    INSERT INTO trident_ledger (txn_id, dataset_id, status, mode, writer, sink, requested_sink, clamped, route_reason,
        started_at, committed_at, ended_at, rows_written, row_count, skipped, preserved, snapshot_id, schema_version,
        source_refs, metadata, pid, host)
    VALUES (p_txn, p_ds, 'committed', p_mode, p_writer, p_sink, p_requested, p_clamped, p_reason,
        p_tau, v_at, v_at, p_n, p_rows, 0, 0, p_snapshot, p_version, p_refs, p_meta, p_pid, p_host)
    ON CONFLICT (txn_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'exists'::text, NULL::timestamptz, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::float8;
        RETURN;
    END IF;
    IF p_ipc IS NOT NULL THEN
        INSERT INTO trident_inline_tail (dataset_id, txn_id, first_row_index, n_rows, ipc)
        VALUES (p_ds, p_txn, p_first, p_n, p_ipc) RETURNING seq INTO v_seq;
    END IF;
    UPDATE trident_datasets SET row_count = p_rows, next_row_index = p_next, last_txn_id = p_txn, committed_at = v_at,
        updated_at = now(), inline_through = coalesce(v_seq, inline_through)
    WHERE dataset_id = p_ds;
    INSERT INTO trident_sync_log (dataset_id, txn_id, sink, snapshot_id, has_identity, rows_written, row_count)
    VALUES (p_ds, p_txn, p_sink, p_snapshot, true, p_n, p_rows);
    -- the tail from its oldest unflushed block (queries.py, _TAIL_FROM_OLDEST: the tail's rows are
    -- the dataset's last ones), for the writer's flush-when-due
    RETURN QUERY SELECT 'committed'::text, v_at, v_at, v_seq,
        coalesce(GREATEST(p_next - o.first_row_index, 1), 0)::bigint, extract(epoch FROM now() - o.created_at)::float8
    FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT t.first_row_index, t.created_at FROM trident_inline_tail t
        WHERE t.dataset_id = p_ds AND t.flushed_by IS NULL ORDER BY t.seq LIMIT 1) o ON true;
END
$$;
