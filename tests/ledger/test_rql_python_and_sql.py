"""Subscriber filters evaluated in Python agree with the search index's SQL, row for row."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, insert

from ackstore.ledger import search
from ackstore.ledger.schema import search_index, search_things
from ackstore.rules import index_rows, rql, rql_eval

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
DOC = {
    "thingId": "org.acme:lamp-1",
    "attributes": {"on": True, "floor": 3, "name": "Lamp", "tags": ["a", "b"], "none": None, "empty": "", "obj": {}},
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("eq(attributes/on,true)", True),
        ("eq(attributes/on,false)", False),
        ("eq(attributes/floor,3)", True),
        ("eq(attributes/floor,3.0)", True),
        ('eq(attributes/floor,"3")', False),  # no conversion between types
        ("gt(attributes/floor,2)", True),
        ("ge(attributes/floor,3)", True),
        ("lt(attributes/floor,3)", False),
        ("le(attributes/floor,3)", True),
        ('ne(attributes/name,"Lamp")', False),
        ('ne(attributes/missing,"x")', True),  # a missing property is "not equal"
        ('eq(attributes/tags,"b")', True),  # any element of an array
        ('in(attributes/name,"x","Lamp")', True),
        ('like(attributes/name,"L*p")', True),
        ('like(attributes/name,"l*p")', False),
        ('ilike(attributes/name,"l*P")', True),
        ('like(attributes/name,"La?p")', True),
        ("exists(attributes/none)", True),
        ("exists(attributes/missing)", False),
        ("empty(attributes/none)", True),
        ("empty(attributes/empty)", True),
        ("empty(attributes/obj)", True),
        ("empty(attributes/missing)", True),
        ("empty(attributes/floor)", False),
        ("eq(attributes/none,null)", True),
        ("and(eq(attributes/on,true),gt(attributes/floor,2))", True),
        ("or(eq(attributes/on,false),lt(attributes/floor,2))", False),
        ("not(eq(attributes/on,false))", True),
        ('eq(/attributes/name,"Lamp")', True),  # a leading slash is allowed
        ("lt(attributes/name,time:now)", False),
        ('eq(topic:action,"modified")', True),
    ],
)
def test_filters_against_a_document(expression: str, expected: bool) -> None:
    rows = rql_eval.rows_by_path(DOC, {"topic:action": "modified"})
    assert rql_eval.matches(rql.parse(expression), rows, now=NOW) is expected


# --- the same answers as the search index's SQL ---------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.5, -0.5]), st.sampled_from(["", "a", "ab", "B", "a*"])
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2),
    max_leaves=6,
)
documents = st.dictionaries(st.sampled_from(["x", "y", "z"]), values, max_size=3)
properties = st.sampled_from(["x", "y", "z", "x/x", "x/y", "y/x"])
operands = st.one_of(scalars.filter(lambda v: v != "a*"), st.just(rql.Placeholder("time:now_epoch_millis")))
comparisons = st.builds(rql.Comparison, st.sampled_from(rql.COMPARISONS), properties, operands)
leaves = st.one_of(
    comparisons,
    st.builds(rql.In, properties, st.lists(operands, min_size=1, max_size=3).map(tuple)),
    st.builds(rql.Exists, properties),
    st.builds(rql.Empty, properties),
)
filters = st.recursive(
    leaves,
    lambda inner: st.builds(rql.Logical, st.sampled_from(["and", "or"]), st.lists(inner, min_size=1, max_size=3).map(tuple))
    | st.builds(rql.Not, inner),
    max_leaves=5,
)


def _index(engine: Engine, docs: list[dict]) -> None:
    with engine.begin() as conn:
        conn.execute(delete(search_index))
        conn.execute(delete(search_things))
        for n, doc in enumerate(docs):
            thing = f"ns:t{n}"
            conn.execute(insert(search_things).values(thing_id=thing, namespace="ns", revision=1, digest="d", present=True))
            rows = [
                {"thing_id": thing, "path": r.path, "ordinal": r.ordinal, "value_type": r.value_type,
                 "value_text": r.value_text, "value_number": Decimal(r.value_number) if r.value_number else None,
                 "value_bool": r.value_bool, "empty": r.empty, "revision": 1}
                for r in index_rows.flatten(doc)
            ]
            if rows:
                conn.execute(insert(search_index), rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(documents, min_size=1, max_size=4), node=filters)
def test_python_and_sql_agree(engine: Engine, docs: list[dict], node: rql.Node) -> None:
    _index(engine, docs)
    with engine.connect() as conn:
        from sqlalchemy import select

        found = set(conn.execute(
            select(search_things.c.thing_id).where(search.compile_filter(node, now=NOW))
        ).scalars())
    expected = {f"ns:t{n}" for n, doc in enumerate(docs) if rql_eval.matches(node, rql_eval.rows_by_path(doc), now=NOW)}
    assert found == expected


# --- like without backtracking ---------------------------------------------------------------------


def _like_by_regex(pattern: str, text: str) -> bool:
    """The obvious translation, exponential on hostile patterns: the reference on small inputs."""
    import re

    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch("".join(parts), text, re.DOTALL) is not None


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ackstore.rules.rql_eval import like_matches  # noqa: E402


@given(st.text("ab*?", max_size=8), st.text("abc", max_size=10))
def test_like_matches_as_the_regex_translation_does(pattern: str, text: str) -> None:
    assert like_matches(pattern, text) == _like_by_regex(pattern, text)


def test_a_hostile_like_pattern_is_answered() -> None:
    """The regex translation would not return from these (exponential backtracking)."""
    assert not like_matches("*a" * 40 + "*b", "a" * 20_000)
    assert like_matches("*a" * 40 + "*", "a" * 20_000)
    assert like_matches("a?c*" * 30, "abc" * 30) and not like_matches("a?c*" * 30 + "d", "abc" * 30)
