"""Keyed writes (upsert, append_new, identity-preserving replace, delete) as DuckDB joins.

pyiceberg's ``upsert`` loads the whole input and compares rows in Python; here the input is staged
into an on-disk DuckDB database and joined against the dataset's existing keys, so memory is capped
by DuckDB's limit whatever the size. The merge is sink-neutral: it says which existing rows go
(``removed``, by ``__row_id``) and which row versions come (``added``, identity stamped); each sink
applies that in its own way.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType

import duckdb
import pyarrow as pa

from ..core.errors import DuplicateKeyError, InvalidWriteError, NullKeyError, SchemaMismatchError
from ..core.identity import CREATED_AT, FILE_COLUMN, ROW_ID, ROW_ID_TEXT, ROW_INDEX, RowIdBlock
from ..core.keys import quote

BATCH_ROWS = 65_536


def capture_errors(reader: pa.RecordBatchReader) -> tuple[pa.RecordBatchReader, list[BaseException]]:
    """``reader`` as a reader that records the exception its producer raises, if any.

    When DuckDB consumes a reader, a producer's exception (or the input's own
    InvalidWriteError for a schema change mid-stream) reaches the caller only as text inside a
    ``duckdb.InvalidInputException``. The caller must get the producer's exception itself, to
    catch it by type: the recorded one is re-raised in place of DuckDB's.
    """
    caught: list[BaseException] = []

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from reader
        except BaseException as exc:
            caught.append(exc)
            raise

    return pa.RecordBatchReader.from_batches(reader.schema, batches()), caught


@dataclass(frozen=True)
class MergePlan:
    matched: int  # input rows whose key exists (identity preserved)
    fresh: int  # input rows with a new key
    removed: int  # existing rows that go
    staged: int  # input rows

    def counts(self, mode: str) -> dict[str, int]:
        """The transaction's counters for ``mode``, as both sinks report them."""
        return {
            "rows_written": 0 if mode == "delete" else (self.fresh if mode == "append_new" else self.staged),
            "deleted": self.removed if mode == "delete" else 0,
            "preserved": self.matched if mode in ("upsert", "replace") else 0,
            "skipped": self.matched if mode == "append_new" else 0,
        }


class KeyedMerge:
    """One merge, one scratch DuckDB database under the transaction's spill folder.

    Scalar results are read with ``fetchall()``: DuckDB 2 keeps a ``fetchone()`` result pending
    and then refuses the next relation (``con.sql``) on the connection."""

    def __init__(self, spill_dir: Path, *, memory_limit: str, threads: int) -> None:
        spill_dir.mkdir(parents=True, exist_ok=True)
        self._path = spill_dir / "merge.duckdb"
        for stale in (self._path, self._path.with_suffix(".duckdb.wal")):  # a crashed attempt's scratch
            stale.unlink(missing_ok=True)
        self.con = duckdb.connect(
            str(self._path),
            # Insertion order is never relied on (fresh rows only need dense indexes), and keeping it
            # makes CREATE TABLE AS hold more than the memory limit on big inputs.
            config={
                "memory_limit": memory_limit,
                "threads": threads,
                "temp_directory": str(spill_dir / "tmp"),
                "preserve_insertion_order": False,
                # A uuid column (Arrow's arrow.uuid) comes back as uuid, not as its text, which
                # the dataset's fixed[16] column refused: upserting into a uuid dataset failed.
                "arrow_lossless_conversion": True,
            },
        )
        self.con.execute("SET TimeZone = 'UTC'")
        self.keys: tuple[str, ...] = ()
        self.user_columns: list[str] = []

    def __enter__(self) -> KeyedMerge:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()
        for p in (self._path, self._path.with_suffix(".duckdb.wal")):
            p.unlink(missing_ok=True)

    # -- staging ----------------------------------------------------------------------------
    def stage(self, reader: pa.RecordBatchReader, keys: tuple[str, ...], *, keys_only: bool = False) -> int:
        """Stage the input and refuse null or duplicate keys before anything is written."""
        missing = [k for k in keys if k not in reader.schema.names]
        if missing:
            raise InvalidWriteError(f"key column(s) {missing} are not in the input (columns: {reader.schema.names})")
        self.keys = keys
        self.user_columns = list(keys) if keys_only else list(reader.schema.names)
        cols = ", ".join(quote(c) for c in self.user_columns)
        staged_input, producer_error = capture_errors(reader)  # noqa: RUF059 - read by DuckDB's replacement scan
        try:
            self.con.execute(f"CREATE TABLE staged AS SELECT {cols} FROM staged_input")
        except duckdb.Error:
            if producer_error:
                raise producer_error[0] from None  # the producer's own exception, not DuckDB's wrapper
            raise
        for k in keys:
            nulls = self.con.execute(f"SELECT count(*) FROM staged WHERE {quote(k)} IS NULL").fetchall()[0][0]
            if nulls:
                raise NullKeyError(k, nulls)
        key_list = ", ".join(quote(k) for k in keys)
        dups = self.con.execute(f"SELECT {key_list} FROM staged GROUP BY {key_list} HAVING count(*) > 1 LIMIT 3").fetchall()
        if dups:
            raise DuplicateKeyError(list(keys), dups)
        return self.con.execute("SELECT count(*) FROM staged").fetchall()[0][0]

    def load_existing(self, reader: pa.RecordBatchReader) -> None:
        """The dataset's current keys and identity (plus ``__file`` when the sink tracks files).

        Rows sharing a key (possible after plain appends) all go on a keyed write; the surviving
        version keeps the identity of the oldest one, so a key never ends up twice.
        """
        missing = [k for k in self.keys if k not in reader.schema.names]
        if missing:
            raise SchemaMismatchError(f"key column(s) {missing} are not in the dataset")
        existing_input = reader  # noqa: F841
        self.con.execute("CREATE TABLE existing AS SELECT * FROM existing_input")
        try:
            self.con.execute(f"SELECT {self._join('s', 'e')} FROM staged s, existing e LIMIT 0")
        except duckdb.Error as exc:
            raise SchemaMismatchError(f"key column types of the input and the dataset do not compare: {exc}") from exc

    def _join(self, a: str, b: str) -> str:
        return " AND ".join(f"{a}.{quote(k)} = {b}.{quote(k)}" for k in self.keys)

    # -- planning ---------------------------------------------------------------------------
    def plan(
        self,
        mode: str,
        *,
        first_index: int | Callable[[int], int],
        txn_id: uuid.UUID,
        tau: datetime,
        row_id_type: pa.DataType = ROW_ID_TEXT,
    ) -> MergePlan:
        """Build ``removed`` and ``added`` for the mode. ``first_index`` is the ``__row_index`` of
        the first new row, or a function of how many new rows there are that returns it (a
        partition write reserves exactly that many in the control plane). New ids are minted in
        ``row_id_type``, the dataset's own ``__row_id`` type (DuckDB's UUID for a uuid table,
        which the lossless Arrow conversion hands back as ``pa.uuid()``), so existing and new ids
        are one type and nothing is cast per row."""
        j = self._join("s", "e")
        self.con.execute(f"CREATE TABLE survivors AS {self._survivors_sql()}")
        has_file = FILE_COLUMN in [r[0] for r in self.con.execute("DESCRIBE existing").fetchall()]
        file_col = f", e.{FILE_COLUMN}" if has_file else ""
        if mode in ("upsert", "delete"):
            removed = f"SELECT e.{ROW_ID}{file_col} FROM existing e SEMI JOIN staged s ON {j}"
        elif mode == "replace":
            removed = f"SELECT e.{ROW_ID}{file_col} FROM existing e"
        else:  # append_new
            removed = f"SELECT e.{ROW_ID}{file_col} FROM existing e WHERE false"
        self.con.execute(f"CREATE TABLE removed AS {removed}")

        staged = self.con.execute("SELECT count(*) FROM staged").fetchall()[0][0]
        matched = self.con.execute(f"SELECT count(*) FROM staged s SEMI JOIN survivors e ON {j}").fetchall()[0][0]
        n_removed = self.con.execute("SELECT count(*) FROM removed").fetchall()[0][0]
        if callable(first_index):
            first_index = first_index(0 if mode == "delete" else staged - matched)
        user = ", ".join(f"s.{quote(c)}" for c in self.user_columns)
        created = f"TIMESTAMPTZ '{tau.isoformat()}'"
        matched_sql = f"SELECT e.{ROW_INDEX}, e.{ROW_ID}, {created} AS {CREATED_AT}, {user} FROM staged s JOIN survivors e ON {j}"
        # New rows: dense indexes from first_index; ids from a freshly minted block, the same
        # scheme (identity.RowIdBlock) streamed writes use, never derived from the caller's txn id.
        ids = RowIdBlock.mint().sql("row_number() OVER () - 1", row_id_type)
        fresh_sql = (
            f"SELECT {first_index} - 1 + row_number() OVER () AS {ROW_INDEX}, {ids} AS {ROW_ID}, "
            f"{created} AS {CREATED_AT}, {user} FROM staged s ANTI JOIN survivors e ON {j}"
        )
        if mode == "upsert" or mode == "replace":
            added = f"{matched_sql} UNION ALL {fresh_sql}"
        elif mode == "append_new":
            added = fresh_sql
        else:  # delete
            added = f"SELECT NULL::BIGINT AS {ROW_INDEX} WHERE false"
        self.con.execute(f"CREATE VIEW added AS {added}")
        return MergePlan(matched=matched, fresh=staged - matched, removed=n_removed, staged=staged)

    def _survivors_sql(self) -> str:
        """One row per existing key: the oldest version (lowest ``__row_index``).

        Keys are almost always unique already, so only the duplicated ones are aggregated, with
        integer-only states; every other row passes through a hash join whose build side is that
        small set. An ``arg_min(__row_id, ...)`` over every group instead holds a string state per
        key, which DuckDB cannot spill: it ran out of memory at a 64 MB limit on a few million keys.
        """
        keys = ", ".join(quote(k) for k in self.keys)
        dups = f"SELECT {keys}, min({ROW_INDEX}) AS __oldest FROM existing GROUP BY ALL HAVING count(*) > 1"
        return (
            f"SELECT {', '.join(f'e.{quote(k)}' for k in self.keys)}, e.{ROW_INDEX}, e.{ROW_ID} "
            f"FROM existing e LEFT JOIN ({dups}) d ON {self._join('e', 'd')} "
            f"WHERE d.__oldest IS NULL OR e.{ROW_INDEX} = d.__oldest"
        )

    def plan_removal(self, removed: pa.RecordBatchReader) -> int:
        """Delete-by-filter: the sink already knows which rows go."""
        removed_input = removed  # noqa: F841
        self.con.execute("CREATE TABLE removed AS SELECT * FROM removed_input")
        self.con.execute(f"CREATE VIEW added AS SELECT NULL::BIGINT AS {ROW_INDEX} WHERE false")
        return self.con.execute("SELECT count(*) FROM removed").fetchall()[0][0]

    # -- results ----------------------------------------------------------------------------
    def affected_files(self) -> list[int]:
        return [r[0] for r in self.con.execute(f"SELECT DISTINCT {FILE_COLUMN} FROM removed ORDER BY 1").fetchall()]

    def removed_ids(self) -> pa.RecordBatchReader:
        return self.con.sql(f"SELECT {ROW_ID} FROM removed").to_arrow_reader(BATCH_ROWS)

    def added_rows(self) -> pa.RecordBatchReader:
        return self.con.sql("SELECT * FROM added").to_arrow_reader(BATCH_ROWS)

    def kept_rows(self, rows: pa.RecordBatchReader) -> pa.RecordBatchReader:
        """Rows of rewritten files that survive the write, unchanged (identity included)."""
        self.con.register("rewritten", rows)
        return self.con.sql(f"SELECT r.* FROM rewritten r ANTI JOIN removed d ON r.{ROW_ID} = d.{ROW_ID}").to_arrow_reader(
            BATCH_ROWS
        )
