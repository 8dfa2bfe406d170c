"""Every control-plane DML statement, named, in one place (the DDL is in ``migrations/``)."""

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS trident_migrations (
    version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())
"""
APPLIED_MIGRATIONS = "SELECT version FROM trident_migrations"
RECORD_MIGRATION = "INSERT INTO trident_migrations (version, name) VALUES (%s, %s)"

_DATASET_COLS = """dataset_id, workspace, key, sink, iceberg_identifier, row_count, next_row_index, schema,
    schema_version, snapshot_id, last_txn_id, committed_at, created_at, updated_at, inline_through, inline_flushed"""
GET_DATASET = f"SELECT {_DATASET_COLS} FROM trident_datasets WHERE workspace = %s AND key = %s"
GET_DATASET_BY_ID = f"SELECT {_DATASET_COLS} FROM trident_datasets WHERE dataset_id = %s"
# A writer that just took a dataset's lock: the record as it is now, and whether any transaction
# of it is still open (only then are the open ones read, to be settled), in one round trip
GET_DATASET_BY_ID_OPEN = f"""SELECT {_DATASET_COLS},
    EXISTS (SELECT 1 FROM trident_ledger l WHERE l.dataset_id = d.dataset_id AND (l.status = 'open' OR l.ref_pending))
        AS has_open
    FROM trident_datasets d WHERE dataset_id = %s"""
GET_DATASET_BY_ID_FOR_UPDATE = f"SELECT {_DATASET_COLS} FROM trident_datasets WHERE dataset_id = %s FOR UPDATE"
LIST_DATASETS = f"""SELECT {_DATASET_COLS} FROM trident_datasets
    WHERE workspace = %s AND last_txn_id IS NOT NULL ORDER BY key"""
GET_DATASETS_BY_KEYS = f"SELECT {_DATASET_COLS} FROM trident_datasets WHERE workspace = %s AND key = ANY(%s)"
INSERT_DATASET = f"""INSERT INTO trident_datasets (dataset_id, workspace, key, sink, iceberg_identifier)
    VALUES (%s, %s, %s, %s, %s) ON CONFLICT (workspace, key) DO NOTHING RETURNING {_DATASET_COLS}"""
SET_DATASET_SINK = "UPDATE trident_datasets SET sink = %s, iceberg_identifier = %s, updated_at = now() WHERE dataset_id = %s"
UPDATE_DATASET_STATS = """UPDATE trident_datasets SET row_count = %s, next_row_index = %s, schema = %s::jsonb,
    schema_version = %s, snapshot_id = %s, last_txn_id = %s, committed_at = %s, updated_at = now()
    WHERE dataset_id = %s"""
UPDATE_DATASET_STATS_PARTITION = """UPDATE trident_datasets SET row_count = %s,
    next_row_index = GREATEST(next_row_index, %s), schema = %s::jsonb,
    schema_version = %s, snapshot_id = %s, last_txn_id = %s, committed_at = %s, updated_at = now()
    WHERE dataset_id = %s"""
# Partition writers run side by side: each reserves the __row_index range of its new rows here,
# atomically, so concurrent writers never stamp the same index (an aborted writer leaves a gap).
RESERVE_ROW_INDEX = """UPDATE trident_datasets SET next_row_index = next_row_index + %s WHERE dataset_id = %s
    RETURNING next_row_index - %s AS first"""
DELETE_DATASET = "DELETE FROM trident_datasets WHERE dataset_id = %s"
# an environment's partition write numbers its rows from a range reserved in the environment's head
# (runs of one environment staged side by side, re-based at their publish, never share an index)
RESERVE_ENV_ROW_INDEX = """UPDATE trident_env_heads SET next_row_index = next_row_index + %s
    WHERE workspace = %s AND environment = %s AND dataset_id = %s AND promoted_at IS NULL
    RETURNING next_row_index - %s AS first"""

_LEDGER_COLS = """txn_id, dataset_id, status, mode, writer, sink, requested_sink, clamped, route_reason, started_at,
    committed_at, ended_at, rows_written, row_count, skipped, preserved, snapshot_id, schema_version, source_refs,
    metadata, error, location, pid, host, base_snapshot_id, staged_at, cleanup_pending, group_id, staged_outcome, ref_pending"""
GET_LEDGER = f"SELECT {_LEDGER_COLS} FROM trident_ledger WHERE txn_id = %s"
# One round trip for what naming a staged version (or an ``as_of`` txn) of a key reads: the
# dataset by key and the ledger entry by txn id, whichever dataset it belongs to (the caller
# checks that it is this one's). The entry's columns come prefixed ``l_``; all NULL: no such txn.
LEDGER_ENTRY_PREFIX = "l_"
GET_DATASET_AND_LEDGER = f"""SELECT {", ".join(f"d.{c.strip()}" for c in _DATASET_COLS.split(","))},
    {", ".join(f"l.{c.strip()} AS {LEDGER_ENTRY_PREFIX}{c.strip()}" for c in _LEDGER_COLS.split(","))}
    FROM trident_datasets d LEFT JOIN trident_ledger l ON l.txn_id = %s
    WHERE d.workspace = %s AND d.key = %s"""
# A key's newest ledger entries without looking its dataset up first (no row: no entry, or no dataset)
# An environment's writes carry its name in their ledger metadata (ENV_LEDGER_META): production's
# history never lists them; an environment's lists its own and production's (the last %s).
ENV_LEDGER_META = "trident.environment"
_IN_ENV = f"(l.metadata->>'{ENV_LEDGER_META}' IS NULL OR l.metadata->>'{ENV_LEDGER_META}' = %s)"
HISTORY_BY_KEY = f"""SELECT {", ".join(f"l.{c.strip()}" for c in _LEDGER_COLS.split(","))}
    FROM trident_ledger l JOIN trident_datasets d ON d.dataset_id = l.dataset_id
    WHERE d.workspace = %s AND d.key = %s AND {_IN_ENV} ORDER BY l.started_at DESC, l.txn_id LIMIT %s"""
HISTORY = f"""SELECT {_LEDGER_COLS} FROM trident_ledger l WHERE dataset_id = %s AND {_IN_ENV}
    ORDER BY started_at DESC, txn_id LIMIT %s"""
OPEN_LEDGER = f"""SELECT {_LEDGER_COLS} FROM trident_ledger
    WHERE status = 'open' AND (%s::uuid IS NULL OR dataset_id = %s::uuid) ORDER BY started_at"""
# τ is Postgres' clock, truncated to what every part of the trident stores (microseconds).
INSERT_OPEN_LEDGER = f"""
INSERT INTO trident_ledger (txn_id, dataset_id, status, mode, writer, sink, requested_sink, clamped, route_reason,
    started_at, source_refs, metadata, pid, host)
VALUES (%s, %s, 'open', %s, %s, %s, %s, %s, %s, date_trunc('microseconds', clock_timestamp()), %s::jsonb, %s::jsonb, %s, %s)
ON CONFLICT (txn_id) DO UPDATE SET status = 'open', started_at = EXCLUDED.started_at, ended_at = NULL,
    error = NULL, mode = EXCLUDED.mode, writer = EXCLUDED.writer, sink = EXCLUDED.sink, pid = EXCLUDED.pid,
    host = EXCLUDED.host, requested_sink = EXCLUDED.requested_sink, clamped = EXCLUDED.clamped,
    route_reason = EXCLUDED.route_reason, source_refs = EXCLUDED.source_refs, metadata = EXCLUDED.metadata,
    location = NULL, staged_at = NULL, base_snapshot_id = NULL, rows_written = NULL, row_count = NULL,
    skipped = NULL, preserved = NULL, snapshot_id = NULL
    WHERE trident_ledger.status IN ('aborted', 'rejected') AND trident_ledger.dataset_id = EXCLUDED.dataset_id
      AND NOT trident_ledger.cleanup_pending
RETURNING {_LEDGER_COLS}"""
# committed_at is when the version became visible (the sink's instant for it, else this clock):
# never τ, which is earlier, nor a staged version's staging instant (its ``staged_at``)
COMMIT_LEDGER = f"""UPDATE trident_ledger SET status = 'committed',
    committed_at = coalesce(%s::timestamptz, date_trunc('microseconds', clock_timestamp())), ended_at = clock_timestamp(),
    rows_written = %s, row_count = %s, skipped = %s, preserved = %s, snapshot_id = %s, schema_version = %s
    WHERE txn_id = %s AND status IN ('open', 'staged') RETURNING {_LEDGER_COLS}"""
# a version staged in an environment makes the environment exist (listed, dropped) as a commit does
STAGE_LEDGER = f"""WITH staged AS (UPDATE trident_ledger SET status = 'staged', staged_at = clock_timestamp(),
    rows_written = %s, row_count = %s, skipped = %s, preserved = %s, snapshot_id = %s, base_snapshot_id = %s,
    staged_outcome = %s::jsonb, group_id = %s
    WHERE txn_id = %s AND status = 'open' RETURNING {_LEDGER_COLS}),
  touched AS (INSERT INTO trident_environments (workspace, name)
    SELECT d.workspace, s.metadata->>'{ENV_LEDGER_META}' FROM staged s JOIN trident_datasets d ON d.dataset_id = s.dataset_id
    WHERE s.metadata->>'{ENV_LEDGER_META}' IS NOT NULL
    ON CONFLICT (workspace, name) DO UPDATE SET last_used_at = now())
SELECT {_LEDGER_COLS} FROM staged"""
# a staged partition member re-based onto other partitions' commits: its new version and base
RESTAGE_LEDGER = f"""UPDATE trident_ledger SET rows_written = %s, row_count = %s, skipped = %s, preserved = %s,
    snapshot_id = %s, base_snapshot_id = %s, staged_outcome = %s::jsonb
    WHERE txn_id = %s AND status = 'staged' RETURNING {_LEDGER_COLS}"""
REJECT_LEDGER = "UPDATE trident_ledger SET status = 'rejected', ended_at = clock_timestamp(), error = %s WHERE txn_id = %s AND status = 'staged'"
STAGED_LEDGER = f"""SELECT {_LEDGER_COLS} FROM trident_ledger
    WHERE status = 'staged' AND (%s::uuid IS NULL OR dataset_id = %s::uuid) ORDER BY started_at"""
# one key's staged versions without looking its dataset up first (no row: none, or no dataset)
STAGED_LEDGER_BY_KEY = f"""SELECT {", ".join(f"l.{c.strip()}" for c in _LEDGER_COLS.split(","))}
    FROM trident_ledger l JOIN trident_datasets d ON d.dataset_id = l.dataset_id
    WHERE l.status = 'staged' AND d.workspace = %s AND d.key = %s ORDER BY l.started_at"""
SET_LEDGER_LOCATION = "UPDATE trident_ledger SET location = %s WHERE txn_id = %s"
# An abort owes a storage cleanup until CLEANUP_DONE says it ran (migrations/0003_ledger_cleanup.sql).
ABORT_LEDGER = """UPDATE trident_ledger SET status = 'aborted', ended_at = clock_timestamp(), error = %s,
    cleanup_pending = true WHERE txn_id = %s AND status = 'open'"""
CLEANUP_DONE = "UPDATE trident_ledger SET cleanup_pending = false WHERE txn_id = %s AND status = 'aborted'"
PENDING_CLEANUPS = f"""SELECT {_LEDGER_COLS} FROM trident_ledger
    WHERE cleanup_pending AND status = 'aborted'
      AND dataset_id IN (SELECT dataset_id FROM trident_datasets WHERE workspace = %s)
      AND (%s::uuid IS NULL OR dataset_id = %s::uuid)
    ORDER BY started_at"""

TRY_WRITER_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 7)) AS locked"
WRITER_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 7))"
# Partition writers hold the dataset lock SHARED (whole-dataset writers hold it exclusive), the
# range locks of their slice (range_locks.py; key: dataset id | lock item, exclusive or shared) and,
# around COMMIT only, the commit lock.
TRY_WRITER_LOCK_SHARED = "SELECT pg_try_advisory_lock_shared(hashtextextended(%s, 7)) AS locked"
WRITER_UNLOCK_SHARED = "SELECT pg_advisory_unlock_shared(hashtextextended(%s, 7))"
# Take range locks %(keys)s in order with modes %(shared)s, starting at 1-based position %(start)s,
# stopping at the first one held by another session: one round trip, and the count taken so far
# is kept (the caller waits for the next one holding those, always in the same order).
TRY_PARTITION_LOCKS = """WITH RECURSIVE step (i, ok) AS (
    SELECT %(start)s::int - 1, true
  UNION ALL
    SELECT s.i + 1, CASE WHEN (%(shared)s::bool[])[s.i + 1]
        THEN pg_try_advisory_lock_shared(hashtextextended((%(keys)s::text[])[s.i + 1], 8))
        ELSE pg_try_advisory_lock(hashtextextended((%(keys)s::text[])[s.i + 1], 8)) END
    FROM step s WHERE s.ok AND s.i < cardinality(%(keys)s::text[]))
SELECT count(*) FILTER (WHERE ok)::int - 1 AS taken FROM step"""
PARTITION_UNLOCKS = """SELECT count(*) FILTER (WHERE CASE WHEN u.shared
    THEN pg_advisory_unlock_shared(hashtextextended(u.key, 8)) ELSE pg_advisory_unlock(hashtextextended(u.key, 8)) END)::int
    AS released FROM unnest(%s::text[], %s::bool[]) AS u (key, shared)"""
TRY_COMMIT_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 9)) AS locked"
COMMIT_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 9))"
# one decision at a time on a staged transaction (the Dagster gate's read-decide-report), held to
# the end of the deciding transaction
STAGED_DECISION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 10))"

INSERT_SCHEMA_VERSION = "INSERT INTO trident_schema_versions (dataset_id, version, schema, txn_id) VALUES (%s, %s, %s::jsonb, %s)"
INSERT_SYNC_LOG = """INSERT INTO trident_sync_log (dataset_id, txn_id, sink, snapshot_id, has_identity, rows_written, row_count)
    VALUES (%s, %s, %s, %s, %s, %s, %s)"""

GET_PROVENANCE = "SELECT provenance FROM trident_provenance WHERE dataset_id = %s"
# describe/provenance: the dataset by key and its provenance in one round trip (no row: no dataset)
GET_DATASET_WITH_PROVENANCE = f"""SELECT {", ".join(f"d.{c.strip()}" for c in _DATASET_COLS.split(","))},
    p.provenance AS p_provenance
    FROM trident_datasets d LEFT JOIN trident_provenance p ON p.dataset_id = d.dataset_id
    WHERE d.workspace = %s AND d.key = %s"""
UPSERT_PROVENANCE = """INSERT INTO trident_provenance (dataset_id, provenance) VALUES (%s, %s::jsonb)
    ON CONFLICT (dataset_id) DO UPDATE SET provenance = EXCLUDED.provenance, updated_at = now()"""

GET_WATERMARKS = """SELECT source_dataset_id, partition_key, watermark FROM trident_watermarks
    WHERE output_dataset_id = %s AND partition_key = ANY(%s)"""
UPSERT_WATERMARK = """INSERT INTO trident_watermarks (output_dataset_id, source_dataset_id, partition_key, watermark,
    source_txn_id, txn_id) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (output_dataset_id, source_dataset_id, partition_key)
    DO UPDATE SET watermark = EXCLUDED.watermark, source_txn_id = EXCLUDED.source_txn_id, txn_id = EXCLUDED.txn_id,
    updated_at = now()"""
# A whole-output write makes every per-partition watermark stale, and a partition write the
# whole-output one: each scope's marks describe rows the other scope's write has since changed.
DROP_PARTITION_WATERMARKS = "DELETE FROM trident_watermarks WHERE output_dataset_id = %s AND partition_key <> ''"
DROP_WHOLE_WATERMARKS = "DELETE FROM trident_watermarks WHERE output_dataset_id = %s AND partition_key = ''"

LIST_FLAGS = "SELECT writer, sink FROM trident_writer_flags WHERE workspace = %s"
UPSERT_FLAG = """INSERT INTO trident_writer_flags (workspace, writer, sink) VALUES (%s, %s, %s)
    ON CONFLICT (workspace, writer) DO UPDATE SET sink = EXCLUDED.sink, updated_at = now()"""
DELETE_FLAG = "DELETE FROM trident_writer_flags WHERE workspace = %s AND writer = %s RETURNING writer"
LIST_PINS = "SELECT key, sink FROM trident_dataset_pins WHERE workspace = %s"
UPSERT_PIN = """INSERT INTO trident_dataset_pins (workspace, key, sink) VALUES (%s, %s, %s)
    ON CONFLICT (workspace, key) DO UPDATE SET sink = EXCLUDED.sink, updated_at = now()"""
DELETE_PIN = "DELETE FROM trident_dataset_pins WHERE workspace = %s AND key = %s RETURNING key"

# -- the pg sink (rows as jsonb; DDL in migrations/0002_pg_rows.sql) ------------------------------
# A dataset's latest commit marker, as a range over dataset_id ordered as trident_pg_commits_latest
# is: "dataset_id = $1 ORDER BY seq DESC" let a generic plan (a prepared statement's, from its
# sixth run) walk the primary key backwards through every newer marker of every dataset; the
# primary key cannot give this order, so any plan reads from the dataset's own range.
_LATEST_MARKER = (
    "FROM trident_pg_commits WHERE dataset_id >= %(ds)s AND dataset_id <= %(ds)s ORDER BY dataset_id, seq DESC LIMIT 1"
)
PG_LATEST_COMMIT = f"SELECT seq, gen, arrow_schema, outcome, txn_id {_LATEST_MARKER}"
PG_LATEST_SEQ = f"SELECT seq {_LATEST_MARKER}"
PG_COMMIT_OF_TXN = "SELECT seq, gen, arrow_schema, outcome, txn_id FROM trident_pg_commits WHERE txn_id = %s"
PG_NEXT_SEQ = "SELECT nextval(pg_get_serial_sequence('trident_pg_commits', 'seq')) AS seq"
PG_INSERT_COMMIT = """INSERT INTO trident_pg_commits (seq, dataset_id, txn_id, gen, arrow_schema, outcome)
    VALUES (%s, %s, %s, %s, %s, %s::jsonb)"""
PG_DELETE_COMMIT = "DELETE FROM trident_pg_commits WHERE txn_id = %s"
# Settled history is purged at the start of the next write (its writer lock proves every earlier
# transaction has committed or been undone): old generations and the undo log.
# Older generations only (gen < g: an index range; gen <> g walked every row of the dataset in the
# index, on every write). No row of a later generation exists: a generation's rows commit with
# its pg commit marker, and the latest marker names the current one.
PG_PURGE_OLD_GENS = "DELETE FROM trident_rows WHERE dataset_id = %(ds)s AND gen < %(gen)s::bigint"
PG_PURGE_UNDO = "DELETE FROM trident_rows_undo WHERE dataset_id = %s"
PG_COPY_ROWS = "COPY trident_rows (dataset_id, gen, row_id, row_index, created_at, txn_id, data) FROM STDIN"
PG_CREATE_GONE = "CREATE TEMP TABLE trident_gone (row_id uuid PRIMARY KEY) ON COMMIT DROP"
PG_COPY_GONE = "COPY trident_gone (row_id) FROM STDIN"
PG_MOVE_GONE_TO_UNDO = """WITH gone AS (
    DELETE FROM trident_rows r USING trident_gone g
    WHERE r.dataset_id = %s AND r.gen = %s AND r.row_id = g.row_id
    RETURNING r.dataset_id, r.gen, r.row_id, r.row_index, r.created_at, r.txn_id, r.data)
INSERT INTO trident_rows_undo (undo_txn_id, dataset_id, gen, row_id, row_index, created_at, txn_id, data)
SELECT %s, dataset_id, gen, row_id, row_index, created_at, txn_id, data FROM gone"""
PG_UNDO_DELETE_WRITTEN = "DELETE FROM trident_rows WHERE dataset_id = %s AND txn_id = %s"
PG_UNDO_RESTORE = """INSERT INTO trident_rows (dataset_id, gen, row_id, row_index, created_at, txn_id, data)
    SELECT dataset_id, gen, row_id, row_index, created_at, txn_id, data FROM trident_rows_undo WHERE undo_txn_id = %s"""
PG_UNDO_FORGET = "DELETE FROM trident_rows_undo WHERE undo_txn_id = %s"
PG_SCAN_ROWS = """SELECT row_index, row_id::text, (extract(epoch FROM created_at) * 1000000)::bigint, data::text
    FROM trident_rows WHERE dataset_id = %s AND gen = %s ORDER BY row_index"""
# Bulk reads (sinks/pg/reader.py): the plan of a generation, then one binary COPY row per
# row-index range whose fields are columns packed by Postgres (see the reader for why).
PG_SCAN_PLAN = """SELECT count(*) AS rows, min(row_index) AS lo, max(row_index) AS hi,
    (SELECT coalesce(sum(pg_column_size(data)), 0) FROM (SELECT data FROM trident_rows
        WHERE dataset_id = %(ds)s AND gen = %(gen)s ORDER BY row_index LIMIT 1000) s)::bigint AS sample_bytes,
    least(count(*), 1000) AS sample_rows
    FROM trident_rows WHERE dataset_id = %(ds)s AND gen = %(gen)s"""
# A range's user columns: ``{fields}`` is one ``string_agg(ROW(0, <member>, ..., 0)::text, E'\\n')``
# per group of columns (sinks/pg/columns.py), each member PG_MEMBER_TEXT or PG_MEMBER_JSON of one key.
PG_COPY_RANGE = """COPY (SELECT string_agg(int8send(row_index), ''::bytea), string_agg(row_id::text, ''),
    string_agg(timestamptz_send(created_at), ''::bytea){fields}
    FROM trident_rows WHERE dataset_id = %s AND gen = %s AND row_index >= %s AND row_index < %s)
    TO STDOUT (FORMAT binary)"""
PG_RANGE_GROUP = "string_agg(ROW(0, {members}, 0)::text, E'\\n')"
PG_MEMBER_TEXT = "data->>{key}"  # a JSON string unescaped, a number's or boolean's text; SQL NULL for JSON null or no key
PG_MEMBER_JSON = "data->{key}"  # the member's own JSON text (lists, structs, timestamps...); SQL NULL when absent
# The read cache (sinks/pg/blocks.py; DDL and the triggers that keep it right in
# migrations/0007_pg_row_blocks.sql). Purges and drops delete blocks by generation first, so the
# triggers fired by the row DELETEs that follow find no block left to check.
PG_INSERT_BLOCK = """INSERT INTO trident_row_blocks (dataset_id, gen, first_row_index, last_row_index, txn_id, n_rows, ipc)
    VALUES (%s, %s, %s, %s, %s, %s, %s)"""
PG_LIST_BLOCKS = """SELECT first_row_index, last_row_index, n_rows FROM trident_row_blocks
    WHERE dataset_id = %s AND gen = %s ORDER BY first_row_index"""
# The generation's lowest and highest row index: two probes of trident_rows_scan (min/max on an
# index prefix), where PG_SCAN_PLAN's count visits every row.
PG_ROW_INDEX_SPAN = """SELECT min(row_index) AS lo, max(row_index) AS hi FROM trident_rows
    WHERE dataset_id = %s AND gen = %s"""
PG_BLOCK_IPC = "SELECT n_rows, ipc FROM trident_row_blocks WHERE dataset_id = %s AND gen = %s AND first_row_index = %s"
PG_PURGE_OLD_BLOCKS = "DELETE FROM trident_row_blocks WHERE dataset_id = %(ds)s AND gen < %(gen)s::bigint"
PG_UNDO_DELETE_BLOCKS = "DELETE FROM trident_row_blocks WHERE dataset_id = %s AND txn_id = %s"
PG_DROP_BLOCKS = "DELETE FROM trident_row_blocks WHERE dataset_id = %s"
# Maintenance's block rebuild: the runs of consecutive row indexes of the generation that no block
# holds (gaps and islands: index minus rank is constant along a run), at least ``min_rows`` long.
# Each row's covering block is the one with the greatest first index at or below it (one backward
# index probe, blocks never overlap). FOR SHARE holds those rows until the blocks built from them
# commit: a DELETE or UPDATE by hand waits, then its trigger sees the new blocks and drops them.
PG_DROP_SMALL_BLOCKS = """DELETE FROM trident_row_blocks WHERE dataset_id = %(ds)s AND gen = %(gen)s
    AND n_rows < %(min_rows)s"""
PG_UNCOVERED_RUNS = """WITH uncovered AS (
        SELECT r.row_index FROM trident_rows r
        WHERE r.dataset_id = %(ds)s AND r.gen = %(gen)s AND NOT EXISTS (
            SELECT 1 FROM (
                SELECT b.last_row_index FROM trident_row_blocks b
                WHERE b.dataset_id = r.dataset_id AND b.gen = r.gen AND b.first_row_index <= r.row_index
                ORDER BY b.first_row_index DESC LIMIT 1
            ) covering WHERE covering.last_row_index >= r.row_index)
        FOR SHARE OF r
    ), runs AS (
        SELECT row_index, row_index - row_number() OVER (ORDER BY row_index) AS run FROM uncovered
    )
    SELECT min(row_index) AS first, max(row_index) AS last FROM runs
    GROUP BY run HAVING count(*) >= %(min_rows)s ORDER BY 1"""
PG_DROP_ROWS = "DELETE FROM trident_rows WHERE dataset_id = %s"
PG_DROP_UNDO = "DELETE FROM trident_rows_undo WHERE dataset_id = %s"
PG_DROP_COMMITS = "DELETE FROM trident_pg_commits WHERE dataset_id = %s"

# -- commits as events (the Dagster ledger sensor): every committed transaction of a workspace in
# commit order. The sync log's id is drawn in the COMMIT step, so it orders commits, not intents.
COMMITS_SINCE = f"""SELECT s.id AS seq, d.key AS dataset_key, {", ".join("l." + c.strip() for c in _LEDGER_COLS.split(","))}
    FROM trident_sync_log s
    JOIN trident_ledger l ON l.txn_id = s.txn_id AND l.status = 'committed'
    JOIN trident_datasets d ON d.dataset_id = s.dataset_id
    WHERE d.workspace = %s AND s.id > %s ORDER BY s.id LIMIT %s"""

# -- transaction groups (migrations/0008_transaction_groups.sql): staged writes of several datasets
# published by one Postgres transaction; the owner holds the group lock for the group's life, so a
# group whose lock can be taken by anyone else has lost its owner.
INSERT_GROUP = """INSERT INTO trident_txn_groups (group_id, workspace, status, label, metadata, pid, host)
    VALUES (%s, %s, 'open', %s, %s::jsonb, %s, %s) ON CONFLICT (group_id) DO NOTHING"""
_GROUP_COLS = "group_id, workspace, status, label, metadata, created_at, ended_at, error, pid, host"
GET_GROUP = f"SELECT {_GROUP_COLS} FROM trident_txn_groups WHERE group_id = %s"
GET_GROUP_FOR_UPDATE = f"SELECT {_GROUP_COLS} FROM trident_txn_groups WHERE group_id = %s FOR UPDATE"
GROUPS_BY_PREFIX = f"""SELECT {_GROUP_COLS} FROM trident_txn_groups
    WHERE workspace = %s AND group_id::text LIKE %s ORDER BY created_at LIMIT 2"""
OPEN_GROUPS = f"SELECT {_GROUP_COLS} FROM trident_txn_groups WHERE workspace = %s AND status = 'open' ORDER BY created_at"
PUBLISH_GROUP = "UPDATE trident_txn_groups SET status = 'published', ended_at = %s WHERE group_id = %s AND status = 'open'"
ABORT_GROUP = """UPDATE trident_txn_groups SET status = 'aborted', ended_at = clock_timestamp(), error = %s
    WHERE group_id = %s AND status = 'open'"""
# an open group kept for audit (a failed Dagster run's, TRIDENT_FAILED_RUN_STAGED=keep): nothing decides it
# on its own any more; a person publishes or discards it
KEEP_GROUP = """UPDATE trident_txn_groups SET metadata = metadata || jsonb_build_object('kept', %s::text)
    WHERE group_id = %s AND status = 'open'"""
GROUP_MEMBERS = f"SELECT {_LEDGER_COLS} FROM trident_ledger WHERE group_id = %s ORDER BY started_at"
# a member still open has no group_id yet (it is set when it stages): its INTENT metadata names the group
GROUP_OPEN_MEMBERS = f"""SELECT {_LEDGER_COLS} FROM trident_ledger
    WHERE status = 'open' AND metadata->>'trident.group' = %s::text"""
TRY_GROUP_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 11)) AS locked"
GROUP_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 11))"
GROUP_INSTANT = "SELECT date_trunc('microseconds', clock_timestamp()) AS at"
MARK_REF_PENDING = "UPDATE trident_ledger SET ref_pending = true WHERE txn_id = ANY(%s)"
CLEAR_REF_PENDING = "UPDATE trident_ledger SET ref_pending = false WHERE txn_id = ANY(%s)"
REF_PENDING = f"""SELECT {_LEDGER_COLS} FROM trident_ledger WHERE ref_pending
    AND dataset_id IN (SELECT dataset_id FROM trident_datasets WHERE workspace = %s)
    AND (%s::uuid IS NULL OR dataset_id = %s::uuid) ORDER BY committed_at"""
# staged members of groups that will never publish (aborted): what the reconciler discards
STRANDED_MEMBERS = f"""SELECT {", ".join(f"l.{c.strip()}" for c in _LEDGER_COLS.split(","))}
    FROM trident_ledger l JOIN trident_txn_groups g ON g.group_id = l.group_id
    WHERE l.status = 'staged' AND g.status = 'aborted' AND g.workspace = %s ORDER BY l.started_at"""
GET_DATASETS_BY_IDS = f"SELECT {_DATASET_COLS} FROM trident_datasets WHERE dataset_id = ANY(%s)"
GET_DATASETS_BY_IDS_FOR_UPDATE = f"""SELECT {_DATASET_COLS} FROM trident_datasets WHERE dataset_id = ANY(%s)
    ORDER BY dataset_id FOR UPDATE"""
REF_PENDING_OF = f"SELECT {_LEDGER_COLS} FROM trident_ledger WHERE ref_pending AND dataset_id = ANY(%s) ORDER BY committed_at"

# -- the inlined tail of iceberg_native datasets (migrations/0009_inline_tail.sql) ------------------
INSERT_INLINE_BLOCK = """INSERT INTO trident_inline_tail (dataset_id, txn_id, first_row_index, n_rows, ipc)
    VALUES (%s, %s, %s, %s, %s) RETURNING seq"""
# the tail range a dataset's record names (migrations/0011_inline_bounds.sql), moved in the COMMIT
# of the inlined write (its block) and of a flush (the last block it moved)
SET_INLINE_THROUGH = "UPDATE trident_datasets SET inline_through = %s WHERE dataset_id = %s"
SET_INLINE_FLUSHED = "UPDATE trident_datasets SET inline_flushed = GREATEST(inline_flushed, %s) WHERE dataset_id = %s"
# The tail a dataset's record names: read after the record, it still shows that record's moment
# (blocks committed later have a higher seq; blocks flushed later are still stored).
# (as a row comparison over (dataset_id, seq): only the dataset's index can serve it, so no plan
# walks other datasets' blocks in seq order; see migrations/0015_tail_in_its_range.sql)
INLINE_TAIL_RANGE = """SELECT seq, n_rows, ipc FROM trident_inline_tail
    WHERE (dataset_id, seq) > (%(ds)s, %(after)s) AND (dataset_id, seq) <= (%(ds)s, %(through)s)
    ORDER BY dataset_id, seq"""
# The tail as a writer sees it, from its oldest unflushed block: the unflushed rows are the
# dataset's last ones (every write that is not inlined flushes the tail first), so they are
# next_row_index minus that block's first index, read through the live index without summing a
# tail that grows with every write (at least 1 while a block is unflushed).
_TAIL_FROM_OLDEST = """CASE WHEN o.first_row_index IS NULL THEN 0 ELSE GREATEST(d.next_row_index - o.first_row_index, 1) END
    AS rows, extract(epoch FROM now() - o.created_at)::float8 AS age_s"""
# (in the dataset's own index range whatever the plan: migrations/0015_tail_in_its_range.sql)
_OLDEST_UNFLUSHED = "LEFT JOIN trident_oldest_unflushed(%(ds)s) o ON true"
# What a writer of the dataset asks before inlining: the tail, and whether a staged version waits
# (its publish would replace main: an inlined write then takes the Iceberg path).
INLINE_STATE = f"""SELECT {_TAIL_FROM_OLDEST},
    EXISTS (SELECT 1 FROM trident_ledger l WHERE l.dataset_id = d.dataset_id AND l.status = 'staged') AS staged
    FROM trident_datasets d {_OLDEST_UNFLUSHED} WHERE d.dataset_id = %(ds)s"""
# describe's "inlined rows": the exact count, block by block
INLINE_ROWS = (
    "SELECT coalesce(sum(n_rows), 0)::bigint AS rows FROM trident_inline_tail WHERE dataset_id = %s AND flushed_by IS NULL"
)
# The current version as readers see it, in ONE statement (one Postgres snapshot): the dataset's
# recorded Iceberg snapshot and the tail not yet flushed into it (no block: one row of NULLs).
INLINE_TAIL = """SELECT d.snapshot_id, t.seq, t.n_rows, t.ipc FROM trident_datasets d
    LEFT JOIN trident_inline_tail t ON t.dataset_id = d.dataset_id AND t.flushed_by IS NULL
    WHERE d.dataset_id = %s ORDER BY t.seq"""
# The tail of a past version (the instant a committed transaction became visible): blocks committed
# at or before it and not flushed (or flushed only after it).
INLINE_TAIL_AT = """SELECT t.seq, t.n_rows, t.ipc FROM trident_inline_tail t
    JOIN trident_ledger w ON w.txn_id = t.txn_id
    LEFT JOIN trident_ledger f ON f.txn_id = t.flushed_by
    WHERE t.dataset_id = %s AND w.status = 'committed' AND w.committed_at <= %s
      AND (t.flushed_by IS NULL OR f.committed_at IS NULL OR f.committed_at > %s)
    ORDER BY t.seq"""
# A flush's COMMIT: the blocks it moved into Iceberg leave the current version.
MARK_INLINE_FLUSHED = """UPDATE trident_inline_tail SET flushed_by = %(flush)s
    WHERE dataset_id >= %(ds)s AND (dataset_id, seq) <= (%(ds)s, %(through)s) AND flushed_by IS NULL"""
# maintain: flushed blocks are kept for time travel as long as the snapshots of their age.
PURGE_FLUSHED_INLINE = """DELETE FROM trident_inline_tail t USING trident_ledger f
    WHERE t.dataset_id = %s AND f.txn_id = t.flushed_by AND f.committed_at < %s"""
# An inlined write as ONE call (migrations/0012_inline_commit.sql has why a function): the lock,
# the compare-and-set on the record the writer stamped from, the ledger row born committed, the
# rows, the stats and the sync log; one row saying what happened.
INLINE_COMMIT = """SELECT outcome, committed_at, ended_at, block_seq, tail_rows, tail_age_s FROM trident_inline_commit(
    %(txn)s, %(ds)s, %(mode)s, %(writer)s, %(sink)s, %(requested)s, %(clamped)s, %(reason)s, %(tau)s, %(n)s, %(rows)s,
    %(next)s, %(snapshot)s, %(version)s, %(refs)s::jsonb, %(meta)s::jsonb, %(pid)s, %(host)s, %(first)s, %(ipc)s::bytea,
    %(expect_next)s, %(expect_last)s)"""
# A pg-sink small append as ONE call (migrations/0014_pg_append.sql)
PG_APPEND = """SELECT outcome, committed_at, seq FROM trident_pg_append(
    %(txn)s, %(ds)s, %(mode)s, %(writer)s, %(requested)s, %(clamped)s, %(reason)s, %(tau)s, %(rows)s, %(snapshot)s,
    %(version)s, %(refs)s::jsonb, %(meta)s::jsonb, %(pid)s, %(host)s, %(expect_next)s, %(expect_last)s, %(gen)s,
    %(purge)s, %(ids)s::uuid[], %(data)s::jsonb, %(block)s::bytea, %(schema)s::bytea, %(outcome)s::jsonb)"""


# -- environments (migrations/0010_environments.sql; ops/environments.py) ------------------------
_HEAD_COLS = """workspace, environment, dataset_id, born_in_env, fork_txn_id, fork_snapshot_id, fork_row_count,
    fork_next_row_index, row_count, next_row_index, schema, schema_version, snapshot_id, last_txn_id, committed_at,
    created_at, updated_at, promoted_at, watermarks"""
TOUCH_ENVIRONMENT = """INSERT INTO trident_environments (workspace, name) VALUES (%s, %s)
    ON CONFLICT (workspace, name) DO UPDATE SET last_used_at = now()"""
_ENV_COLS = """e.workspace, e.name, e.created_at, e.last_used_at,
    (SELECT count(*) FROM trident_env_heads h WHERE h.workspace = e.workspace AND h.environment = e.name
        AND h.promoted_at IS NULL)::int AS datasets"""
LIST_ENVIRONMENTS = f"SELECT {_ENV_COLS} FROM trident_environments e WHERE e.workspace = %s ORDER BY e.name"
GET_ENVIRONMENT = f"SELECT {_ENV_COLS} FROM trident_environments e WHERE e.workspace = %s AND e.name = %s"
DELETE_ENVIRONMENT = "DELETE FROM trident_environments WHERE workspace = %s AND name = %s"
# the live heads (what the environment's readers read); promoted ones only where said
ENV_HEADS = f"""SELECT {_HEAD_COLS} FROM trident_env_heads WHERE workspace = %s AND environment = %s
    AND (promoted_at IS NULL OR %s)"""
ENV_HEADS_OF = f"""SELECT {_HEAD_COLS} FROM trident_env_heads
    WHERE workspace = %s AND environment = %s AND dataset_id = ANY(%s) AND promoted_at IS NULL"""
ENV_HEADS_OF_FOR_UPDATE = """SELECT dataset_id, snapshot_id FROM trident_env_heads
    WHERE workspace = %s AND environment = %s AND dataset_id = ANY(%s) AND promoted_at IS NULL
    ORDER BY dataset_id FOR UPDATE"""
MARK_HEADS_PROMOTED = """UPDATE trident_env_heads SET promoted_at = now()
    WHERE workspace = %s AND environment = %s AND dataset_id = ANY(%s)"""
# an environment write that forks again (its earlier head was promoted): the old row goes first
DROP_PROMOTED_HEAD = """DELETE FROM trident_env_heads WHERE workspace = %s AND environment = %s AND dataset_id = %s
    AND promoted_at IS NOT NULL"""
ALL_ENV_HEADS_OF = f"SELECT {_HEAD_COLS} FROM trident_env_heads WHERE dataset_id = %s AND promoted_at IS NULL"
# an environment's compaction (ops/maintain.py): its head moves to the compacted snapshot of its
# branch (the same rows), only from the snapshot it compacted (the writer lock is held)
MOVE_ENV_HEAD_SNAPSHOT = """UPDATE trident_env_heads SET snapshot_id = %s, updated_at = now()
    WHERE workspace = %s AND environment = %s AND dataset_id = %s AND snapshot_id = %s AND promoted_at IS NULL"""
DELETE_ENV_HEADS = "DELETE FROM trident_env_heads WHERE workspace = %s AND environment = %s AND dataset_id = ANY(%s)"
# An environment write's COMMIT: its version becomes the environment's head of the dataset (the
# fork is the one its first write recorded: kept on every later write)
UPSERT_ENV_HEAD = """INSERT INTO trident_env_heads (workspace, environment, dataset_id, born_in_env, fork_txn_id,
    fork_snapshot_id, fork_row_count, fork_next_row_index, row_count, next_row_index, schema, schema_version,
    snapshot_id, last_txn_id, committed_at, watermarks)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s::jsonb)
    ON CONFLICT (workspace, environment, dataset_id) DO UPDATE SET row_count = EXCLUDED.row_count,
        watermarks = EXCLUDED.watermarks,
        -- only ever grows: partition writes of the environment reserve past it (RESERVE_ENV_ROW_INDEX)
        next_row_index = GREATEST(trident_env_heads.next_row_index, EXCLUDED.next_row_index), schema = EXCLUDED.schema, schema_version = EXCLUDED.schema_version,
        snapshot_id = EXCLUDED.snapshot_id, last_txn_id = EXCLUDED.last_txn_id, committed_at = EXCLUDED.committed_at,
        updated_at = now()"""
# every dataset record of a workspace, also those production never committed (born in an environment)
LIST_ALL_DATASETS = f"SELECT {_DATASET_COLS} FROM trident_datasets WHERE workspace = %s ORDER BY key"
# A promotion, rebased onto a production that moved: the staged ledger row of a version made from
# an environment's head (its snapshot is already on the table), recorded as a staged write records it
INSERT_STAGED_LEDGER = f"""INSERT INTO trident_ledger (txn_id, dataset_id, status, mode, writer, sink, requested_sink,
    clamped, route_reason, started_at, staged_at, rows_written, row_count, skipped, preserved, snapshot_id,
    base_snapshot_id, staged_outcome, group_id, source_refs, metadata, pid, host)
    VALUES (%s, %s, 'staged', %s, %s, %s, %s, false, %s, date_trunc('microseconds', clock_timestamp()),
        clock_timestamp(), %s, %s, 0, 0, %s, %s, %s::jsonb, %s, '[]'::jsonb, %s::jsonb, %s, %s)
    RETURNING {_LEDGER_COLS}"""
# an environment's watermarks of one dataset (no row: it has no live head there, production's count)
ENV_HEAD_WATERMARKS = """SELECT watermarks FROM trident_env_heads
    WHERE environment = %s AND dataset_id = %s AND promoted_at IS NULL"""
# every watermark production recorded for an output (what an environment's fork starts from)
ALL_WATERMARKS = """SELECT source_dataset_id, partition_key, watermark, source_txn_id FROM trident_watermarks
    WHERE output_dataset_id = %s"""
