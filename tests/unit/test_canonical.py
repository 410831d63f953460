"""The canonical byte form of a ledger row (ackstore/rules/canonical.py): each type's documented
bytes, independence from column order, every change of a value changes it. That it is exactly what
PostgreSQL's record_send writes: tests/ledger/test_canonical_python_and_sql.py."""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ackstore.rules.canonical import INFINITE_MICROS, OIDS, encode_row, from_micros, micros

UTC = timezone.utc
Y2K = datetime(2000, 1, 1, tzinfo=UTC)


def record(*values: bytes) -> bytes:
    """A record of the table name "t" and ``values`` (each already oid ‖ length ‖ bytes)."""
    return struct.pack(">i", len(values) + 1) + struct.pack(">Ii", 25, 1) + b"t" + b"".join(values)


def value(kind: str, data: bytes | None) -> bytes:
    return struct.pack(">Ii", OIDS[kind], -1) if data is None else struct.pack(">Ii", OIDS[kind], len(data)) + data


@pytest.mark.parametrize(("kind", "given_value", "data"), [
    ("int8", None, None),
    ("bool", True, b"\x01"),
    ("bool", False, b"\x00"),
    ("int2", 7, b"\x00\x07"),
    ("int4", -1, b"\xff" * 4),
    ("int8", 7, (7).to_bytes(8, "big")),
    ("text", "Ä", "Ä".encode()),
    ("timestamptz", Y2K + timedelta(microseconds=5), (5).to_bytes(8, "big")),
    ("timestamptz", datetime(2000, 1, 1, 2, tzinfo=timezone(timedelta(hours=2))), bytes(8)),
    ("timestamptz", 946_684_800_000_001, (1).to_bytes(8, "big")),  # microseconds since 1970, as exported
    ("timestamptz", datetime(1970, 1, 1, tzinfo=UTC), (-946_684_800_000_000).to_bytes(8, "big", signed=True)),
    ("jsonb", '{"a": 1}', b'\x01{"a": 1}'),
    ("text[]", [], struct.pack(">iiI", 0, 0, 25)),
    ("text[]", ["a", None], struct.pack(">iiIii", 1, 1, 25, 2, 1) + struct.pack(">i", 1) + b"a" + struct.pack(">i", -1)),
])
def test_each_type_has_its_documented_bytes(kind: str, given_value, data: bytes | None) -> None:
    assert encode_row("t", {"c": given_value}, {"c": kind}) == record(value(kind, data))


def test_columns_go_in_name_order_whatever_the_rows_order() -> None:
    types = {"b": "int4", "a": "text"}
    assert encode_row("t", {"b": 1, "a": "x"}, types) == record(value("text", b"x"), value("int4", b"\x00\x00\x00\x01"))
    assert encode_row("t", {"a": "x", "b": 1}, types) == encode_row("t", {"b": 1, "a": "x"}, types)


def test_what_has_no_canonical_form_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_row("t", {"c": datetime(2026, 1, 1)}, {"c": "timestamptz"})  # naive
    with pytest.raises(TypeError):
        encode_row("t", {"c": 1.5}, {"c": "int8"})
    with pytest.raises(TypeError):
        encode_row("t", {"c": True}, {"c": "int8"})
    with pytest.raises(TypeError):
        encode_row("t", {"c": {"a": 1}}, {"c": "jsonb"})  # jsonb is its text, never re-serialised
    with pytest.raises(ValueError):
        encode_row("t", {"c": 1}, {"c": "int8", "d": "int8"})  # a missing column
    with pytest.raises(OverflowError):
        encode_row("t", {"c": 2**15}, {"c": "int2"})


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(-100, 100), min_size=1))
def test_every_value_and_the_table_name_count(row: dict) -> None:
    types = {name: "int8" for name in row}
    name = sorted(row)[0]
    assert encode_row("t", {**row, name: row[name] + 1}, types) != encode_row("t", row, types)
    assert encode_row("u", row, types) != encode_row("t", row, types)


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)))
def test_a_timestamp_in_microseconds_reads_back_as_itself(moment: datetime) -> None:
    assert from_micros(micros(moment)) == moment


def test_the_infinities_read_back_as_psycopg2_reads_them() -> None:
    """The archive keeps PostgreSQL's infinities as a bigint's extremes; read back, they are the
    earliest and the latest datetime, as psycopg2 gives them for the hot row."""
    assert from_micros(INFINITE_MICROS["-infinity"]) == datetime.min.replace(tzinfo=UTC)
    assert from_micros(INFINITE_MICROS["infinity"]) == datetime.max.replace(tzinfo=UTC)
    assert INFINITE_MICROS == {"-infinity": -(2**63), "infinity": 2**63 - 1}
