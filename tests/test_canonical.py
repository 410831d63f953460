"""The canonical byte form of a ledger row (ackstore/rules/canonical.py): every row of its
type table, independence from column order, and that every change of a value changes it."""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ackstore.rules.canonical import encode_row

UTC = timezone.utc


def column(name: str, tag: bytes, value: bytes) -> bytes:
    return struct.pack(">I", len(name)) + name.encode() + tag + struct.pack(">I", len(value)) + value


@pytest.mark.parametrize(("value", "tag", "data"), [
    (None, b"N", b""),
    (True, b"B", b"\x01"),
    (False, b"B", b"\x00"),
    (7, b"I", (7).to_bytes(8, "big")),
    (-1, b"I", b"\xff" * 8),
    ("Ä", b"T", "Ä".encode()),
    (datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=UTC), b"S", (1_000_005).to_bytes(8, "big")),
    (datetime(1970, 1, 1, 2, 0, 0, 5, tzinfo=timezone(timedelta(hours=2))), b"S", (5).to_bytes(8, "big")),
    (["a", "bc"], b"A", struct.pack(">I", 2) + b"T" + struct.pack(">I", 1) + b"a" + b"T" + struct.pack(">I", 2) + b"bc"),
])
def test_each_type_has_its_documented_bytes(value, tag: bytes, data: bytes) -> None:
    assert encode_row("t", {"c": value}) == b"ackstore-row/1" + struct.pack(">I", 1) + b"t" + struct.pack(">H", 1) \
        + column("c", tag, data)


def test_jsonb_is_sorted_compact_utf8() -> None:
    row = encode_row("t", {"j": {"b": [1, "ü"], "a": None}}, json_columns={"j"})
    assert row.endswith(column("j", b"J", '{"a":null,"b":[1,"ü"]}'.encode()))
    assert encode_row("t", {"j": None}, json_columns={"j"}).endswith(column("j", b"N", b""))


def test_no_naive_timestamp_and_no_unknown_type() -> None:
    with pytest.raises(ValueError):
        encode_row("t", {"c": datetime(2026, 1, 1)})
    with pytest.raises(TypeError):
        encode_row("t", {"c": 1.5})


values = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(),
                   st.lists(st.text(), max_size=3),
                   st.datetimes(timezones=st.just(UTC)))


@given(st.dictionaries(st.text(min_size=1, max_size=5), values, min_size=1, max_size=6), st.randoms())
def test_column_order_does_not_matter_and_every_value_counts(row: dict, randomness) -> None:
    names = list(row)
    randomness.shuffle(names)
    assert encode_row("t", {n: row[n] for n in names}) == encode_row("t", row)
    name = names[0]
    changed = {**row, name: "different" if row[name] != "different" else "other"}
    assert encode_row("t", changed) != encode_row("t", row)
    assert encode_row("u", row) != encode_row("t", row)
