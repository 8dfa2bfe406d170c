-- A small append to a pg-sink dataset as ONE call, like an inlined write (0012): the rows go
-- straight into trident_rows (and their row block), with the commit marker, the ledger row born
-- committed, the dataset's stats and the sync log, in the one Postgres transaction that takes the
-- dataset's writer lock. The normal door costs a pg append ~17 statements in two transactions.
--
-- The parts both one-call writes share are functions of their own, so the rules (which lock,
-- which compare-and-set, what waits) are written once; trident_inline_commit is redefined on them.
-- Each is VOLATILE: every statement in it reads with a fresh snapshot, after the lock.

-- The lock and the checks: 'ok', or why nothing may be written (see 0012 for each answer).
CREATE OR REPLACE FUNCTION trident_small_commit_gate(
    p_ds uuid, p_sink text, p_snapshot bigint, p_version integer, p_expect_next bigint, p_expect_last uuid)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended(p_ds::text, 7)) THEN
        RETURN 'busy';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM trident_datasets d WHERE d.dataset_id = p_ds AND d.next_row_index = p_expect_next
            AND d.last_txn_id IS NOT DISTINCT FROM p_expect_last AND d.snapshot_id IS NOT DISTINCT FROM p_snapshot
            AND d.schema_version IS NOT DISTINCT FROM p_version AND d.sink = p_sink) THEN
        RETURN 'stale';
    END IF;
    IF EXISTS (SELECT 1 FROM trident_ledger l WHERE l.dataset_id = p_ds AND l.status = 'open')
            OR EXISTS (SELECT 1 FROM trident_ledger l WHERE l.dataset_id = p_ds AND l.status = 'staged')
            OR EXISTS (SELECT 1 FROM trident_ledger l WHERE l.dataset_id = p_ds AND l.ref_pending) THEN
        RETURN 'waiting';
    END IF;
    RETURN 'ok';
END
$$;

-- The ledger row, born committed at this clock (never before tau); NULL: the txn id is taken.
CREATE OR REPLACE FUNCTION trident_small_commit_ledger(
    p_txn uuid, p_ds uuid, p_mode text, p_writer text, p_sink text, p_requested text, p_clamped boolean,
    p_reason text, p_tau timestamptz, p_n bigint, p_rows bigint, p_snapshot bigint, p_version integer,
    p_refs jsonb, p_meta jsonb, p_pid integer, p_host text)
RETURNS timestamptz LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_at timestamptz := GREATEST(date_trunc('microseconds', clock_timestamp()), p_tau);
BEGIN
    INSERT INTO trident_ledger (txn_id, dataset_id, status, mode, writer, sink, requested_sink, clamped, route_reason,
        started_at, committed_at, ended_at, rows_written, row_count, skipped, preserved, snapshot_id, schema_version,
        source_refs, metadata, pid, host)
    VALUES (p_txn, p_ds, 'committed', p_mode, p_writer, p_sink, p_requested, p_clamped, p_reason,
        p_tau, v_at, v_at, p_n, p_rows, 0, 0, p_snapshot, p_version, p_refs, p_meta, p_pid, p_host)
    ON CONFLICT (txn_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN v_at;
END
$$;

-- The dataset's stats and the sync log of a committed small write.
CREATE OR REPLACE FUNCTION trident_small_commit_stats(
    p_txn uuid, p_ds uuid, p_sink text, p_at timestamptz, p_n bigint, p_rows bigint, p_next bigint,
    p_snapshot bigint, p_through bigint)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE trident_datasets SET row_count = p_rows, next_row_index = p_next, last_txn_id = p_txn, committed_at = p_at,
        snapshot_id = p_snapshot, updated_at = now(), inline_through = coalesce(p_through, inline_through)
    WHERE dataset_id = p_ds;
    INSERT INTO trident_sync_log (dataset_id, txn_id, sink, snapshot_id, has_identity, rows_written, row_count)
    VALUES (p_ds, p_txn, p_sink, p_snapshot, true, p_n, p_rows);
END
$$;

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
    FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT t.first_row_index, t.created_at FROM trident_inline_tail t
        WHERE t.dataset_id = p_ds AND t.flushed_by IS NULL ORDER BY t.seq LIMIT 1) o ON true;
END
$$;

-- A pg-sink append: rows p_ids/p_data (row ids, and a jsonb array of each row's user columns as the
-- pg sink's codec encodes them) numbered from p_first, into generation p_gen, which the dataset's latest commit
-- (seq p_snapshot) holds; p_block, when given, is their row block (0007). Settled
-- history is purged first, as every pg write does (the lock proves every earlier write settled).
-- p_outcome is the commit marker's outcome; its snapshot_id is the new commit's seq, known here.
CREATE OR REPLACE FUNCTION trident_pg_append(
    p_txn uuid, p_ds uuid, p_mode text, p_writer text, p_requested text, p_clamped boolean,
    p_reason text, p_tau timestamptz, p_rows bigint, p_snapshot bigint, p_version integer, p_refs jsonb,
    p_meta jsonb, p_pid integer, p_host text, p_expect_next bigint, p_expect_last uuid,
    p_gen bigint, p_purge boolean, p_ids uuid[], p_data jsonb, p_block bytea, p_schema bytea, p_outcome jsonb)
RETURNS TABLE (outcome text, committed_at timestamptz, seq bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_gate text := trident_small_commit_gate(p_ds, 'pg', p_snapshot, p_version, p_expect_next, p_expect_last);
    v_n bigint := cardinality(p_ids);
    v_seq bigint;
    v_at timestamptz;
BEGIN
    IF v_gate = 'ok' THEN
        v_seq := nextval(pg_get_serial_sequence('trident_pg_commits', 'seq'));
        v_at := trident_small_commit_ledger(p_txn, p_ds, p_mode, p_writer, 'pg', p_requested, p_clamped, p_reason,
            p_tau, v_n, p_rows, v_seq, p_version, p_refs, p_meta, p_pid, p_host);
        v_gate := CASE WHEN v_at IS NULL THEN 'exists' ELSE 'ok' END;
    END IF;
    IF v_gate <> 'ok' THEN
        RETURN QUERY SELECT v_gate, NULL::timestamptz, NULL::bigint;
        RETURN;
    END IF;
    -- each purge only when it has something to delete: a DELETE fires the rows' statement trigger.
    -- NOT p_purge: the writer's previous one-call append, the dataset's latest commit, purged.
    IF p_purge AND EXISTS (SELECT 1 FROM trident_rows r WHERE r.dataset_id = p_ds AND r.gen < p_gen) THEN
        DELETE FROM trident_row_blocks b WHERE b.dataset_id = p_ds AND b.gen < p_gen;
        DELETE FROM trident_rows r WHERE r.dataset_id = p_ds AND r.gen < p_gen;
    END IF;
    IF p_purge AND EXISTS (SELECT 1 FROM trident_rows_undo u WHERE u.dataset_id = p_ds) THEN
        DELETE FROM trident_rows_undo u WHERE u.dataset_id = p_ds;
    END IF;
    INSERT INTO trident_rows (dataset_id, gen, row_id, row_index, created_at, txn_id, data)
    SELECT p_ds, p_gen, x.id, p_expect_next + x.ord - 1, p_tau, p_txn, x.d
    FROM ROWS FROM (unnest(p_ids), jsonb_array_elements(p_data)) WITH ORDINALITY AS x(id, d, ord);
    IF p_block IS NOT NULL THEN
        INSERT INTO trident_row_blocks (dataset_id, gen, first_row_index, last_row_index, txn_id, n_rows, ipc)
        VALUES (p_ds, p_gen, p_expect_next, p_expect_next + v_n - 1, p_txn, v_n, p_block);
    END IF;
    INSERT INTO trident_pg_commits (seq, dataset_id, txn_id, gen, arrow_schema, outcome)
    VALUES (v_seq, p_ds, p_txn, p_gen, p_schema, p_outcome || jsonb_build_object('snapshot_id', v_seq));
    PERFORM trident_small_commit_stats(p_txn, p_ds, 'pg', v_at, v_n, p_rows, p_expect_next + v_n, v_seq, NULL);
    RETURN QUERY SELECT 'committed'::text, v_at, v_seq;
END
$$;
