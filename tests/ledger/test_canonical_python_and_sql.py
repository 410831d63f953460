"""The canonical byte form of a ledger row in Python (ackstore/rules/canonical.py) is exactly what
PostgreSQL's record_send writes for ROW(table, …) (the SQL half: the seal's leaves,
ackstore/ledger/sql/objects/sealing.sql), for generated values of every type."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore.rules.canonical import encode_row

UTC = timezone.utc


texts = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=20)
KINDS = {
    "bool": st.booleans(),
    "int2": st.integers(-2**15, 2**15 - 1),
    "int4": st.integers(-2**31, 2**31 - 1),
    "int8": st.integers(-2**63, 2**63 - 1),
    "text": texts,
    "timestamptz": st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)),
    "jsonb": st.recursive(st.none() | st.booleans() | st.integers(-10**20, 10**20) | texts,
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                          max_leaves=6),
    "text[]": st.lists(st.none() | texts, max_size=4),
}
CASTS = {"bool": "boolean", "int2": "smallint", "int4": "integer", "int8": "bigint", "text": "text",
         "timestamptz": "timestamptz", "jsonb": "jsonb", "text[]": "text[]"}
rows = st.dictionaries(st.sampled_from(sorted(KINDS)), st.none(), min_size=1).flatmap(
    lambda chosen: st.fixed_dictionaries({kind: st.none() | KINDS[kind] for kind in chosen}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows)
def test_it_is_postgresql_record_send_of_the_row(migrated_engine: Engine, row: dict) -> None:
    """Each generated row (one column per type, named after it) encodes to what PostgreSQL sends
    for ROW('t', the columns in name order) — jsonb given as PostgreSQL's own text of it."""
    import json

    names = sorted(row)
    casts = ", ".join(f"CAST(:{i} AS {CASTS[name]})" for i, name in enumerate(names))
    params = {str(i): json.dumps(row[name]) if name == "jsonb" and row[name] is not None else row[name]
              for i, name in enumerate(names)}
    with migrated_engine.connect() as conn:
        sent = bytes(conn.execute(text(f"SELECT record_send(ROW('t'::text, {casts}))"), params).scalar_one())
        if row.get("jsonb") is not None:  # the jsonb text PostgreSQL prints, as exports carry it
            row = {**row, "jsonb": conn.execute(text("SELECT CAST(CAST(:j AS jsonb) AS text)"),
                                                {"j": params[str(names.index("jsonb"))]}).scalar_one()}
    assert encode_row("t", row, {name: name for name in names}) == sent
