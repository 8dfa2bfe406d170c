"""The write modes: one name per rule a write follows (``Trident.write`` documents each)."""

from __future__ import annotations

from typing import Literal, get_args

WriteMode = Literal["replace", "append", "upsert", "append_new", "delete"]
WRITE_MODES: tuple[WriteMode, ...] = get_args(WriteMode)
