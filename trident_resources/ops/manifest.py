"""``dataset.manifest``: datasets of file pointers (object key, size, checksum, content type).

They are control-plane data by design, so the writer's ``max_mode`` is ``pg``: no flag or pin can
move them into the lakehouse. Rows are keyed by ``object_key``; describe/history work as for any
dataset because they go through the client like every other write.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..core.errors import SchemaMismatchError
from ..planning.inputs import to_reader

MANIFEST_WRITER = "dataset.manifest"
MANIFEST_KEY = "object_key"
MANIFEST_FIELDS = (
    pa.field("object_key", pa.large_string()),
    pa.field("size", pa.int64()),
    pa.field("checksum", pa.large_string()),
    pa.field("content_type", pa.large_string()),
)


def manifest_table(entries: Any, *, keys_only: bool = False) -> pa.Table:
    """Validate and normalise manifest rows: the four pointer columns (extra columns are kept);
    ``keys_only`` (a delete) needs and keeps just ``object_key``."""
    if isinstance(entries, list) and (not entries or isinstance(entries[0], dict)):
        entries = pa.Table.from_pylist(entries) if entries else pa.table({f.name: pa.array([], f.type) for f in MANIFEST_FIELDS})
    table = to_reader(entries).read_all()
    fields = MANIFEST_FIELDS[:1] if keys_only else MANIFEST_FIELDS
    missing = [f.name for f in fields if f.name not in table.column_names]
    if missing:
        raise SchemaMismatchError(
            f"a manifest needs columns {[f.name for f in MANIFEST_FIELDS]}; missing {missing}. "
            "Build rows with manifest_entries(paths) or pass dicts with those keys"
        )
    if keys_only:
        table = table.select([MANIFEST_KEY])
    for f in fields:
        col = table.column(f.name)
        try:
            table = table.set_column(table.schema.get_field_index(f.name), f, col.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError(f"manifest column {f.name!r} must be {f.type}: {exc}") from exc
    if table.num_rows and table.column("object_key").null_count:
        raise SchemaMismatchError("every manifest row needs an object_key")
    rest = [n for n in table.column_names if n not in {f.name for f in fields}]
    return table.select([f.name for f in fields] + rest)


def manifest_entries(paths: Iterable[str | Path], *, root: str | Path | None = None, algorithm: str = "sha256") -> pa.Table:
    """Pointer rows for local files: key relative to ``root`` (or the path), size, ``sha256:<hex>``
    checksum (streamed in 1 MiB blocks), content type guessed from the name."""
    rows = []
    for p in paths:
        path = Path(p)
        digest = hashlib.new(algorithm)
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        key = path.relative_to(root).as_posix() if root is not None else path.as_posix()
        rows.append(
            {
                "object_key": key,
                "size": path.stat().st_size,
                "checksum": f"{algorithm}:{digest.hexdigest()}",
                "content_type": mimetypes.guess_type(path.name)[0] or "application/octet-stream",
            }
        )
    return manifest_table(rows)
