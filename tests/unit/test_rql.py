"""B.12: Ditto's RQL dialect, every operator and value kind, and errors with their position."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackstore.rules import rql
from ackstore.rules.errors import DittoError
from ackstore.rules.rql import Comparison, Empty, Exists, In, Logical, Not, Placeholder

VALID = [
    ('eq(attributes/location,"kitchen")', Comparison("eq", "attributes/location", "kitchen")),
    ("ne(/attributes/location,'hall')", Comparison("ne", "attributes/location", "hall")),
    ("gt(attributes/floor,2)", Comparison("gt", "attributes/floor", 2)),
    ("ge(attributes/floor,-2)", Comparison("ge", "attributes/floor", -2)),
    ("lt(features/f1/properties/x,1.5)", Comparison("lt", "features/f1/properties/x", 1.5)),
    ("le(features/f1/properties/x,1e3)", Comparison("le", "features/f1/properties/x", 1000.0)),
    ('like(attributes/name,"ki*ch?n")', Comparison("like", "attributes/name", "ki*ch?n")),
    ('ilike(attributes/name,"KI*")', Comparison("ilike", "attributes/name", "KI*")),
    ("eq(attributes/on,true)", Comparison("eq", "attributes/on", True)),
    ("eq(attributes/on,false)", Comparison("eq", "attributes/on", False)),
    ("eq(attributes/gone,null)", Comparison("eq", "attributes/gone", None)),
    ("lt(_modified,time:now)", Comparison("lt", "_modified", Placeholder("time:now"))),
    ("gt(attributes/t,time:now_epoch_millis)", Comparison("gt", "attributes/t", Placeholder("time:now_epoch_millis"))),
    ('eq(attributes/q,"say \\"hi\\"")', Comparison("eq", "attributes/q", 'say "hi"')),
    ("eq(attributes/q,'it\\'s')", Comparison("eq", "attributes/q", "it's")),
    ('eq(thingId,"org.acme:t1")', Comparison("eq", "thingId", "org.acme:t1")),
    ('in(attributes/color,"red","green",3)', In("attributes/color", ("red", "green", 3))),
    ("exists(features/lamp)", Exists("features/lamp")),
    ("empty(attributes/tags)", Empty("attributes/tags")),
    ("not(exists(features/lamp))", Not(Exists("features/lamp"))),
    (
        "and(eq(a/b,1),or(eq(c,2),not(empty(d))))",
        Logical("and", (Comparison("eq", "a/b", 1), Logical("or", (Comparison("eq", "c", 2), Not(Empty("d")))))),
    ),
    ("and(eq(a,1))", Logical("and", (Comparison("eq", "a", 1),))),
    (" and( eq(a, 1) , eq(b,2) ) ", Logical("and", (Comparison("eq", "a", 1), Comparison("eq", "b", 2)))),
]


@pytest.mark.parametrize(("expression", "tree"), VALID, ids=[v[0] for v in VALID])
def test_valid_expressions(expression: str, tree: rql.Node) -> None:
    assert rql.parse(expression) == tree


INVALID = [
    # (expression, problem, 1-based position)
    ("", "expected an operator", 1),
    ("eq(a,", "expected a value", 6),
    ("foo(a,1)", "unknown operator 'foo'", 1),
    ("eq(a,1) x", "unexpected input after the end", 9),
    ("eq(,1)", "expected a property", 4),
    ("eq(/,1)", "expected a property", 4),
    ('eq(a,"x)', "the string is not closed", 9),
    ("eq(a,truex)", "expected a value", 6),
    ("eq(a,kitchen)", "expected a value", 6),
    ("eq(a,1", "expected ')' but found the end", 7),
    ("eq(a 1)", "expected ',' but found '1'", 6),
    ("and()", "expected an operator", 5),
    ("in(a)", "expected ','", 5),
    ("exists(a,b)", "expected ')' but found ','", 9),
    ("eq(a,1)eq(b,2)", "unexpected input after the end", 8),
    ("eq(a,'x'); drop table things", "unexpected input after the end", 10),
    ("not(" * 70 + "exists(a)" + ")" * 70, "nests deeper than 64", 261),
]


@pytest.mark.parametrize(("expression", "problem", "position"), INVALID, ids=[i[0][:30] for i in INVALID])
def test_invalid_expressions_name_the_position(expression: str, problem: str, position: int) -> None:
    with pytest.raises(DittoError) as raised:
        rql.parse(expression)
    assert raised.value.status == 400 and raised.value.error == "rql.expression.invalid"
    assert problem in raised.value.message
    assert raised.value.message.endswith(f"at position {position}.")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("eqandortexisn(),'\"\\/ 12.:_-abcfglkmt")), max_size=40))
def test_parser_raises_only_its_own_error(text: str) -> None:
    try:
        rql.parse(text)
    except DittoError as error:
        assert error.error == "rql.expression.invalid"


# --- what a sender gives is bounded (decisions #117) --------------------------------------------------

from ackstore.rules import limits  # noqa: E402

W = limits.MAX_LIKE_WILDCARDS


def _sized(size: int) -> str:
    """An expression of exactly ``size`` bytes of UTF-8."""
    head, tail = 'eq(attributes/s,"', '")'
    return head + "x" * (size - len(head) - len(tail)) + tail


BOUNDED = [
    # (expression, a problem or None, 1-based position)
    (_sized(limits.MAX_RQL_BYTES), None, 0),
    (_sized(limits.MAX_RQL_BYTES + 1), f"it is 5,121 bytes long, more than the maximum of 5,120", 5121),
    ('eq(a,"' + "é" * 2600 + '")', "it is 5,208 bytes long, more than the maximum of 5,120", 2564),  # bytes, not characters
    ('like(a,"' + "*a" * (W // 2) + '")', None, 0),
    ('like(a,"' + "?" * W + '")', None, 0),
    ('like(a,"' + "?" * (W + 1) + '")', f"the pattern holds {W + 1} wildcards (* and ?), more than the maximum of {W}", 8),
    ('and(eq(b,1), ilike(a, "' + "*?" * 9 + '"))', f"the pattern holds 18 wildcards (* and ?), more than the maximum of {W}", 23),
    ('eq(a,"' + "?" * 40 + '")', None, 0),  # only a like pattern's are wildcards
    ('in(a,"' + "*" * 40 + '")', None, 0),
    ("or(" + ",".join(f'like(a,"{"?" * W}")' for _ in range(40)) + ")", None, 0),  # each pattern within: fine
]


@pytest.mark.parametrize(("expression", "problem", "position"), BOUNDED, ids=[b[0][:40] for b in BOUNDED])
def test_an_expression_a_sender_gives_is_bounded(expression: str, problem: str | None, position: int) -> None:
    assert rql.parse(expression)  # stored filters, search: read as ever
    if problem is None:
        assert rql.parse_sent(expression) == rql.parse(expression)
        return
    with pytest.raises(DittoError) as raised:
        rql.parse_sent(expression)
    assert (raised.value.status, raised.value.error) == (400, "rql.expression.invalid")
    assert raised.value.message.endswith(f"is invalid: {problem} at position {position}.")


# --- like: the same answers as a regex, at most linear-ish in the text -----------------------------

import re  # noqa: E402

from ackstore.rules.rql_eval import like_matches  # noqa: E402


def _like_by_regex(pattern: str, text: str) -> bool:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch("".join(parts), text, re.DOTALL) is not None


@settings(max_examples=2000, deadline=None)
@given(st.text("ab*??*\n", max_size=14), st.text("abc\n", max_size=24))
def test_like_answers_as_the_regex_translation(pattern: str, text: str) -> None:
    assert like_matches(pattern, text) == _like_by_regex(pattern, text)
    assert like_matches(pattern.upper(), text, ignore_case=True) == _like_by_regex(pattern, text.lower())


N = 99_000
HOSTILE = [  # each answered by one scan or a few: the old search of each ?-piece took minutes
    ("*" + "?" * W + "b*", "a" * N, False),  # issue 50's shape, as far as the bounds allow
    ("*" + "?" * 4000 + "b*", "a" * N, False),  # (parse_sent refuses it; a stored filter may hold it)
    ("*" + "?".join(["a" * 330] * (W - 2)) + "b*", "a" * N, False),
    ("*" + "a?" * (W // 2) + "b*", "a" * N, False),
    ("*?" + "a" * 5000 + "b*", "a" * N, False),
    ("*" + "a" * 2500 + "?" + "a" * 2499 + "b*", "a" * N, False),
    ("*a?b*", "ab" * (N // 2), False),
    ("*b?b*", "ab" * (N // 2), True),
    ("*" + "a?" * 7 + "a*", "a" * N, True),
]


@pytest.mark.parametrize(("pattern", "text", "expected"), HOSTILE, ids=[h[0][:24] for h in HOSTILE])
def test_a_hostile_like_is_answered(pattern: str, text: str, expected: bool) -> None:
    assert like_matches(pattern, text) is expected
