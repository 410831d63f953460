"""The canonical byte form of a ledger row (issue 28's seals): what a Merkle leaf hashes. It does
not depend on the order of a table's columns nor on PostgreSQL's text output, so an auditor's
own program can rebuild it from an export.

    row    = "ackstore-row/1" ‖ field(table) ‖ u16(number of columns) ‖ column…   (columns in name order)
    column = field(name) ‖ tag ‖ field(value)
    field  = u32(length) ‖ bytes                                             (big-endian lengths)

| tag | column type                 | value bytes                                                  |
|-----|-----------------------------|--------------------------------------------------------------|
| N   | NULL                        | none                                                         |
| B   | boolean                     | 1 byte: 0 or 1                                               |
| I   | integer, bigint             | 8 bytes, two's complement, big-endian                        |
| T   | text                        | UTF-8                                                        |
| S   | timestamp with time zone    | microseconds since 1970-01-01T00:00:00Z, as I                |
| J   | jsonb                       | JSON with sorted keys, no spaces, UTF-8, integers as written |
| A   | array (text[])              | u32(count) ‖ (tag ‖ field(value))… of its elements           |
"""

from __future__ import annotations

import json
import struct
from datetime import datetime, timezone
from typing import Any, Collection, Mapping

MAGIC = b"ackstore-row/1"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def encode_row(table: str, row: Mapping[str, Any], json_columns: Collection[str] = ()) -> bytes:
    """The canonical bytes of ``row`` of ``table``; ``json_columns`` are its jsonb columns (a
    Python list is a JSON array there, a text[] elsewhere)."""
    parts = [MAGIC, _field(table.encode("utf-8")), struct.pack(">H", len(row))]
    for name in sorted(row):
        tag, value = _json(row[name]) if name in json_columns and row[name] is not None else _value(row[name])
        parts += [_field(name.encode("utf-8")), tag, _field(value)]
    return b"".join(parts)


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _value(value: Any) -> tuple[bytes, bytes]:
    if value is None:
        return b"N", b""
    if isinstance(value, bool):
        return b"B", b"\x01" if value else b"\x00"
    if isinstance(value, int):
        return b"I", value.to_bytes(8, "big", signed=True)
    if isinstance(value, str):
        return b"T", value.encode("utf-8", "surrogatepass")
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a timestamp without a time zone has no canonical form")
        delta = value - EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return b"S", micros.to_bytes(8, "big", signed=True)
    if isinstance(value, (list, tuple)):
        items = [tag + _field(data) for tag, data in map(_value, value)]
        return b"A", struct.pack(">I", len(items)) + b"".join(items)
    raise TypeError(f"no canonical form for {type(value).__name__}")


def _json(value: Any) -> tuple[bytes, bytes]:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return b"J", text.encode("utf-8", "surrogatepass")
