"""B.11 / B.12: flattening documents for the index, and RQL compiled to bound SQL."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy.dialects import postgresql

from ackstore.ledger import search
from ackstore.rules import index_rows, rql
from ackstore.rules.index_rows import IndexRow


def test_flatten_nested_objects_arrays_numbers_booleans() -> None:
    rows = index_rows.flatten(
        {"thingId": "a:b", "attributes": {"n": 1.5, "big": 10**30, "on": False, "none": None, "empty": "",
                                           "tags": ["x", ["y"], {"k": 1}], "obj": {}}}
    )
    assert rows == [
        IndexRow("thingId", 0, "string", value_text="a:b"),
        IndexRow("attributes", 0, "object"),
        IndexRow("attributes/n", 0, "number", value_number="1.5"),
        IndexRow("attributes/big", 0, "number", value_number=str(10**30)),
        IndexRow("attributes/on", 0, "boolean", value_bool=False),
        IndexRow("attributes/none", 0, "null", empty=True),
        IndexRow("attributes/empty", 0, "string", value_text="", empty=True),
        IndexRow("attributes/tags", 0, "array"),
        IndexRow("attributes/tags", 1, "string", value_text="x"),  # elements share the array's path
        IndexRow("attributes/tags", 2, "array"),
        IndexRow("attributes/tags", 3, "string", value_text="y"),
        IndexRow("attributes/tags", 4, "object"),
        IndexRow("attributes/tags/k", 0, "number", value_number="1"),
        IndexRow("attributes/obj", 0, "object", empty=True),
    ]


def test_flatten_escapes_slashes_in_keys_and_deleted_things_have_no_rows() -> None:
    assert index_rows.flatten({"a/b": {"c~d": 1}})[1].path == "a~1b/c~0d"
    assert index_rows.flatten(None) == []


def test_flatten_any_depth_without_recursion() -> None:
    """A document past Python's stack (a ledger from before the depth limits may hold one) is
    flattened all the same, depth first: a row per level, each with its path."""
    deep: object = "leaf"
    for _ in range(5000):
        deep = {"a": [deep]}
    rows = index_rows.flatten({"x": deep, "y": 1})
    assert len(rows) == 2 * 5000 + 2
    assert rows[-2] == IndexRow("x" + "/a" * 5000, 1, "string", value_text="leaf")  # its array is 0
    assert rows[-1] == IndexRow("y", 0, "number", value_number="1")


def test_like_pattern_translation() -> None:
    assert search.like_pattern("kit*en?") == "kit%en_"
    assert search.like_pattern("100%_\\") == "100\\%\\_\\\\"


def test_every_value_is_a_bind_parameter() -> None:
    hostile = "x'); DROP TABLE signals; --"
    clause = search.compile_filter(rql.parse(f'or(eq(attributes/a,"{hostile}"),like(attributes/b,"{hostile}*"))'))
    compiled = clause.compile(dialect=postgresql.dialect())
    assert "DROP TABLE" not in str(compiled)
    assert hostile in compiled.params.values()


def test_time_placeholders_resolve_to_the_given_now() -> None:
    now = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
    compiled = search.compile_filter(
        rql.parse("and(lt(attributes/at,time:now),lt(attributes/ms,time:now_epoch_millis))"), now=now
    ).compile(dialect=postgresql.dialect())
    assert "2026-11-22T10:00:00.000Z" in compiled.params.values()
    assert int(now.timestamp() * 1000) in compiled.params.values()
