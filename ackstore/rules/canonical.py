"""The canonical byte form of a ledger row (issue 28's seals): what a Merkle leaf hashes.

A row of table ``t`` with columns ``c1 < c2 < … < cn`` (in name order, whatever the table's own
order) is the PostgreSQL binary form of the record ``ROW(t, c1, …, cn)`` — what ``record_send``
writes, the wire protocol's documented, version-independent form, which the ledger computes at C
speed and an auditor's program rebuilds with ``struct`` alone:

    record = i32(n + 1) ‖ value(text, t) ‖ value(type(c1), c1) ‖ … ‖ value(type(cn), cn)
    value  = u32(type OID) ‖ i32(-1)                       for NULL
           | u32(type OID) ‖ i32(length) ‖ bytes           otherwise (big-endian throughout)

| type        | OID  | bytes                                                                    |
|-------------|------|--------------------------------------------------------------------------|
| bool        | 16   | 1 byte: 0 or 1                                                           |
| int2/4/8    | 21/23/20 | 2/4/8 bytes, two's complement                                        |
| text        | 25   | UTF-8                                                                    |
| timestamptz | 1184 | i64 microseconds since 2000-01-01T00:00:00Z                              |
| jsonb       | 3802 | 0x01 ‖ the value's jsonb text as PostgreSQL prints it (``value::text``:   |
|             |      | keys by length then bytes, ``", "`` and ``": "``; it depends on no setting) |
| text[]      | 1009 | i32(dims: 0 or 1) ‖ i32(has a NULL) ‖ u32(25) ‖ [i32(count) ‖ i32(1)] ‖  |
|             |      | (i32(length) ‖ UTF-8, or i32(-1))…                                       |

No PostgreSQL text output of a timestamp or a number is hashed, so DateStyle, TimeZone and
extra_float_digits change nothing. A jsonb value is hashed as its jsonb text: exports and the
archive carry jsonb columns as that text, so a leaf is rebuilt without re-serialising JSON.
"""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

# PostgreSQL's type OIDs of the types a sealed table has (pg_type; fixed since 8.x, jsonb since 9.4).
OIDS = {"bool": 16, "int2": 21, "int4": 23, "int8": 20, "text": 25, "timestamptz": 1184, "jsonb": 3802,
        "text[]": 1009}
INT_BYTES = {"int2": 2, "int4": 4, "int8": 8}
UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
POSTGRES_EPOCH_MICROS = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970
# PostgreSQL's -infinity and infinity as the archive keeps them: a bigint's extremes, as PostgreSQL
# does. Only hand-outs hold them (a live one never leased is available from -infinity), and they
# are in no seal: encode_row's bytes are not PostgreSQL's for an infinity, and no fact holds one.
INFINITE_MICROS = {"-infinity": -(2**63), "infinity": 2**63 - 1}
_INFINITE_DATETIMES = {INFINITE_MICROS["-infinity"]: datetime.min.replace(tzinfo=timezone.utc),
                       INFINITE_MICROS["infinity"]: datetime.max.replace(tzinfo=timezone.utc)}


def encode_row(table: str, row: Mapping[str, Any], types: Mapping[str, str]) -> bytes:
    """The canonical bytes of ``row`` of ``table``, whose columns have ``types`` (name -> a key of
    OIDS). A timestamp is an aware datetime or microseconds since 1970; jsonb is its text."""
    if set(row) != set(types):
        raise ValueError(f"a row of {table} has columns {sorted(row)}, not {sorted(types)}")
    parts = [struct.pack(">i", len(types) + 1), _value("text", table)]
    parts += [_value(types[name], row[name]) for name in sorted(types)]
    return b"".join(parts)


def micros(value: datetime | int) -> int:
    """Microseconds since 1970 of an aware datetime (or of microseconds already)."""
    if isinstance(value, int):
        return value
    if value.tzinfo is None:
        raise ValueError("a timestamp without a time zone has no canonical form")
    delta = value - UNIX_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """The aware datetime of microseconds since 1970; :data:`INFINITE_MICROS` as the earliest or the
    latest datetime, as psycopg2 reads the infinities (so a row reads the same hot or archived; its
    microseconds are then those of year 1 or 9999, not the extremes again)."""
    return _INFINITE_DATETIMES.get(value) or UNIX_EPOCH + timedelta(microseconds=value)


def _value(kind: str, value: Any) -> bytes:
    oid = struct.pack(">I", OIDS[kind])
    if value is None:
        return oid + struct.pack(">i", -1)
    data = _bytes(kind, value)
    return oid + struct.pack(">i", len(data)) + data


def _bytes(kind: str, value: Any) -> bytes:
    if kind == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"bool expected, not {type(value).__name__}")
        return b"\x01" if value else b"\x00"
    if kind in INT_BYTES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{kind} expected, not {type(value).__name__}")
        return value.to_bytes(INT_BYTES[kind], "big", signed=True)
    if kind == "text":
        return _text(value)
    if kind == "timestamptz":
        return (micros(value) - POSTGRES_EPOCH_MICROS).to_bytes(8, "big", signed=True)
    if kind == "jsonb":
        return b"\x01" + _text(value)
    if kind == "text[]":
        return _text_array(value)
    raise TypeError(f"no canonical form for type {kind}")


def _text(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"text expected, not {type(value).__name__}")
    return value.encode("utf-8")


def _text_array(values: Any) -> bytes:
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"text[] expected, not {type(values).__name__}")
    if not values:
        return struct.pack(">iiI", 0, 0, OIDS["text"])
    header = struct.pack(">iiIii", 1, int(any(v is None for v in values)), OIDS["text"], len(values), 1)
    items = [struct.pack(">i", -1) if v is None else struct.pack(">i", len(b := _text(v))) + b for v in values]
    return header + b"".join(items)
