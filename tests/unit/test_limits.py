"""The depth and path bounds where a sender's JSON enters (decisions #115): every reader of a
message — a signal, an ack, a live response; text, bytes or a dict — answers past them 400 in
Ditto's shape, naming what is too deep; at them, it reads the message."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackstore.rules import connectivity, envelopes, errors, jsontext, limits
from ackstore.rules.errors import DittoError
from tests.support.deep_json import dumps, nested, nested_text

MAX = 1024 * 1024
DEPTH, VALUE_DEPTH = limits.MAX_JSON_DEPTH, limits.MAX_VALUE_DEPTH
SEGMENTS = limits.MAX_POINTER_SEGMENTS


def command(value: Any = 1, path: str = "/attributes/x") -> dict[str, Any]:
    return {"topic": "org.acme/t/things/twin/commands/modify", "headers": {"correlation-id": "c"}, "path": path,
            "value": value}


def ack(payload: Any) -> dict[str, Any]:
    return {"topic": "org.acme/t/things/twin/acks/app:done", "headers": {"correlation-id": "c"}, "path": "/",
            "status": 200, "value": payload}


def aggregated_ack(payload: Any) -> dict[str, Any]:
    return {"topic": "org.acme/t/things/twin/acks", "headers": {"correlation-id": "c"}, "path": "/",
            "value": {"app:done": {"status": 200, "payload": payload}}}


def live_response(value: Any = 1, path: str = "/outbox/messages/ask") -> dict[str, Any]:
    return {"topic": "org.acme/t/things/live/messages/ask", "headers": {"correlation-id": "c"}, "path": path,
            "status": 200, "value": value}


# (name, envelope, how it is read, the error code past the bound or None, the pointer named)
ROWS: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], Any], str | None, str | None]] = [
    ("a value at the limit", command(nested(VALUE_DEPTH)), envelopes.parse_signal, None, None),
    ("a value one level past it", command(nested(VALUE_DEPTH + 1)), envelopes.parse_signal, "json.invalid",
     "/value" + "/a" * VALUE_DEPTH),
    ("arrays one level past it", command(json.loads("[" * (VALUE_DEPTH + 1) + "]" * (VALUE_DEPTH + 1))),
     envelopes.parse_signal, "json.invalid", "/value" + "/0" * VALUE_DEPTH),
    ("headers one level past it", {**command(), "headers": {"correlation-id": "c", "x": nested(DEPTH - 1)}},
     envelopes.parse_signal, "json.invalid", "/headers/x" + "/a" * (DEPTH - 2)),
    ("a key needing escapes in the pointer", command({"a/b~c": nested(VALUE_DEPTH)}), envelopes.parse_signal,
     "json.invalid", "/value/a~1b~0c" + "/a" * (DEPTH - 2)),
    ("an ack's payload past it", ack(nested(VALUE_DEPTH + 1)), envelopes.parse_acknowledgement, "json.invalid", None),
    ("an aggregated ack's payload past it", aggregated_ack(nested(DEPTH - 2)), envelopes.parse_acknowledgement,
     "json.invalid", None),
    ("an aggregated ack's payload at it", aggregated_ack(nested(DEPTH - 3)), envelopes.parse_acknowledgement,
     None, None),
    ("a live response's value past it", live_response(nested(VALUE_DEPTH + 1)), envelopes.parse_live_response,
     "json.invalid", None),
    ("a path at the limit", command(path="/attributes" + "/a" * (SEGMENTS - 1)), envelopes.parse_signal, None, None),
    ("a path one segment past it", command(path="/attributes" + "/a" * SEGMENTS), envelopes.parse_signal,
     "json.pointer.invalid", None),
    ("a path of 1 200 segments (issue 50, b)", command(path="/attributes" + "/a" * 1200), envelopes.parse_signal,
     "json.pointer.invalid", None),
    ("a live response's path past it", live_response(path="/outbox" + "/a" * SEGMENTS),
     envelopes.parse_live_response, "json.pointer.invalid", None),
    ("a value 600 deep (issue 50, a)", command(nested(600)), envelopes.parse_signal, "json.invalid", None),
    ("a value 980 deep (issue 50, c)", command(nested(980)), envelopes.parse_signal, "json.invalid", None),
]


@pytest.mark.parametrize("form", ["dict", "text", "bytes", "full parse"])
@pytest.mark.parametrize("envelope, parse, code, pointer", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_the_door_reads_a_message_at_the_bounds_and_answers_one_past_them(
        form: str, envelope: dict, parse: Callable, code: str | None, pointer: str | None) -> None:
    if form == "full parse":  # a backslash keeps the text off msgspec's fast path
        message: object = dumps({**envelope, "note": "\\"})
    else:
        message = envelope if form == "dict" else dumps(envelope) if form == "text" else dumps(envelope).encode()
    try:
        parsed = parse(envelopes.load_envelope(message, MAX))
    except DittoError as error:
        assert code is not None, error
        assert (error.status, error.error) == (400, code)
        assert set(error.to_json()) == {"status", "error", "message", "description"}
        if code == "json.invalid":
            assert f"deeper than the maximum of {DEPTH} levels at <" in error.message
        else:
            assert f"more than the maximum of {SEGMENTS}." in error.message
        if pointer is not None:
            assert f"<{errors._clip(pointer)}>" in error.message
        return
    assert code is None, parsed


@pytest.mark.parametrize("text, pointer", [
    ('{"topic":' + "[" * 100_000, "/topic" + "/0" * VALUE_DEPTH),  # no JSON, and deeper than Python's stack
    ('{"topic":"x","value":' + nested_text(100_000) + "}", "/value" + "/a" * VALUE_DEPTH),
    ('{"topic":"x","value":[1,' + nested_text(5000, "[", "]") + "]}", "/value/1" + "/0" * (DEPTH - 2)),
    ('{"a\\"/~b":' + nested_text(5000) + ',"x":1}', "/a\"~1~0b" + "/a" * VALUE_DEPTH),
])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_json_deeper_than_pythons_stack_is_answered_with_where_it_is_too_deep(text: str, pointer: str,
                                                                             as_bytes: bool) -> None:
    """The text is scanned, not read, for its depth: however deep, the answer names the place."""
    message = text.encode() if as_bytes else text
    for read in (lambda: envelopes.load_envelope(message, MAX), lambda: envelopes.parse_text(message, MAX)):
        with pytest.raises(DittoError) as raised:
            read()
        assert (raised.value.status, raised.value.error) == (400, "json.invalid")
        assert raised.value.message == (f"The JSON nests objects and arrays deeper than the maximum of {DEPTH} "
                                        f"levels at <{errors._clip(pointer)}>.")


def test_a_python_dict_deeper_than_the_encoders_stack_is_answered_with_its_pointer() -> None:
    with pytest.raises(DittoError) as raised:
        envelopes.load_envelope(command(nested(5000)), MAX)
    assert raised.value.error == "json.invalid" and "at </value/a/a/a" in raised.value.message


def test_a_connectors_body_past_the_limit_is_answered_by_the_door() -> None:
    """parse_text reads a broker's body before its headers are merged: past the limit it is 400,
    whether msgspec's fast path or the full parse reads it."""
    past = command(nested(VALUE_DEPTH + 1))
    for text in (json.dumps(past), json.dumps({**past, "n": "\\"})):
        with pytest.raises(DittoError) as raised:
            envelopes.parse_text(text.encode(), MAX)
        assert raised.value.error == "json.invalid" and "/value/a/a" in raised.value.message
    assert envelopes.parse_text(json.dumps(command(nested(VALUE_DEPTH))).encode(), MAX)["value"] == nested(VALUE_DEPTH)


# --- the JSON helpers: no recursion, whatever the depth ---------------------------------------------

@pytest.mark.parametrize("value, depth", [
    (1, 0), ("x", 0), (None, 0), ({}, 1), ([], 1), ({"a": 1}, 1), ([[]], 2), ({"a": [1, {"b": {}}]}, 4),
    ([1, [2, [3]], {"x": {"y": {"z": []}}}], 5), ((1, (2,)), 2), (nested(10_000), 10_000),
])
def test_depth(value: Any, depth: int) -> None:
    assert jsontext.depth(value) == depth
    assert jsontext.too_deep(value, depth) is None
    if depth:
        assert jsontext.too_deep(value, depth - 1) is not None


@pytest.mark.parametrize("value, max_depth, pointer", [
    ({"a": {"b": 1}, "c": {"d": {"e": {}}}}, 2, "/c/d"),  # the first container past it, depth first
    ([[1], [[2]]], 2, "/1/0"),
    ({"x/y": {"~": {}}}, 2, "/x~1y/~0"),
    ({}, 0, "/"),
])
def test_too_deep_names_the_first_container_past_the_limit(value: Any, max_depth: int, pointer: str) -> None:
    assert jsontext.too_deep(value, max_depth) == pointer


@pytest.mark.parametrize("text, length", [
    ("[]", 0), (" [ ] ", 0), ("[1]", 1), ('[""]', 1), ("[1,2]", 2), ('["a,b",["["],{"x":[1,2]}]', 3),
    (json.dumps(['\\",', "x"]), 2), ('[["l",200,' + "[" * 5000 + "]" * 5000 + ',true,{},false],["m",1,null,false,{},false]]', 2),
])
def test_array_length_counts_elements_without_reading_them(text: str, length: int) -> None:
    assert jsontext.array_length(text) == length


@pytest.mark.parametrize("text, plain", [
    ('{"a":[1,{"b":2}]}', {"a": [1, {"b": 2}]}),
    ('{"a":1,"a":2}', None),  # a name twice: the full parse decides
    ('{"a":"\\n"}', None),  # a backslash: likewise
    (nested_text(DEPTH + 1), None),  # past the depth: likewise (it answers the 400)
    (nested_text(DEPTH), nested(DEPTH)),
    ('{"s":"' + "{" * 500 + '"}', {"s": "{" * 500}),  # brackets in a string are no depth
])
def test_the_fast_path_reads_only_plain_text_within_the_depth(text: str, plain: Any) -> None:
    assert jsontext.parse_plain(text, DEPTH) == plain
    assert jsontext.parse_plain(text.encode(), DEPTH) == plain


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab/~"\\{[,:]} ', max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='ab/~"\\{[,:]} ', max_size=3),
                                                                inner, max_size=3),
    max_leaves=12,
)


@given(value=_json_values, max_depth=st.integers(0, 5))
def test_the_text_scan_finds_what_the_walk_finds(value: Any, max_depth: int) -> None:
    """too_deep_in_text (a scan of the text, for text no reader may read) names the same place as
    too_deep (a walk of the value), whatever the strings in between hold."""
    assert jsontext.too_deep_in_text(json.dumps(value), max_depth) == jsontext.too_deep(value, max_depth)
    assert jsontext.too_deep_in_text(json.dumps(value, indent=1).encode(), max_depth) == jsontext.too_deep(value, max_depth)


@given(value=_json_values, max_depth=st.integers(0, 5), ascii_only=st.booleans())
def test_the_bracket_count_of_text_nests_as_the_value(value: Any, max_depth: int, ascii_only: bool) -> None:
    """nests_within (the door's check of a message's text, its strings set aside) agrees with the
    depth of the value, whatever its strings hold: brackets, quotes, backslashes."""
    within = jsontext.depth(value) <= max_depth
    assert jsontext.nests_within(json.dumps(value, ensure_ascii=ascii_only), max_depth) is within
    assert jsontext.nests_within(json.dumps(value, separators=(",", ":")).encode(), max_depth) is within
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)
    if "\\" not in text and isinstance(value, dict):  # the fast path's own check
        assert (jsontext.parse_plain(text, max_depth) is not None) is within


# --- a broker's body: its depth checked once, as it is read (envelopes.CheckedMessage) ---------------

def _answer(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except DittoError as error:
        return error.to_json()


def _deep_header(levels: int, shape: str) -> Any:
    """An AMQP field table (or array) ``levels`` deep."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value} if shape == "objects" else [value]
    return value


_bodies = st.builds(lambda levels, where: dumps({**command(nested(levels)), "headers": {"correlation-id": "c"}}
                                                if where == "value" else
                                                {**command(), "headers": {"correlation-id": "c", "x": nested(levels)}}),
                    st.sampled_from([0, 1, VALUE_DEPTH - 2, VALUE_DEPTH - 1, VALUE_DEPTH, VALUE_DEPTH + 1]),
                    st.sampled_from(["value", "headers"]))
_amqp_headers = st.dictionaries(
    st.sampled_from(["x-a", "x-b", "correlation-id", "requested-acks"]),
    st.one_of(st.text(st.characters(exclude_characters="\x00"), max_size=4), st.integers(), st.builds(_deep_header, st.sampled_from(
        [1, DEPTH - 4, DEPTH - 3, DEPTH - 2, DEPTH - 1, 300]), st.sampled_from(["objects", "arrays"]))),
    max_size=3)


@settings(max_examples=300, deadline=None)
@given(body=_bodies.map(str.encode), amqp_headers=_amqp_headers)
def test_a_brokers_message_is_answered_as_the_same_dict_from_a_caller(body: bytes, amqp_headers: dict) -> None:
    """The connector's envelope — its body's depth checked as it was read, the AMQP headers merged —
    is not walked again when stored, unless a header it added holds objects or arrays; either way
    the ledger answers it exactly as the same message given as a plain dict (always checked). A
    header nesting past the bound is refused by the connector with the door's own answer."""
    as_a_callers = json.loads(body)
    as_a_callers["headers"] = {**as_a_callers["headers"],
                               **{name: value for name, value in amqp_headers.items()
                                  if name not in as_a_callers["headers"]}}
    callers_answer = _answer(lambda: envelopes.load_envelope(as_a_callers, MAX))
    try:
        envelope = connectivity.inbound_envelope(body, amqp_headers, {}, max_bytes=MAX)
    except DittoError as refused:  # the header it added, named; the door may name another place first
        assert (refused.status, refused.error) == (callers_answer["status"], callers_answer["error"]) == (
            400, "json.invalid")
        assert any(f"at </headers/{name}/" in refused.message for name in amqp_headers)
        return
    if isinstance(envelope, bytes):  # a body the door refuses is left as it came, headers unmerged
        callers_answer = _answer(lambda: envelopes.load_envelope(json.loads(body), MAX))
    assert _answer(lambda: envelopes.load_envelope(envelope, MAX)) == callers_answer
    nesting_added = any(isinstance(value, (dict, list)) for name, value in amqp_headers.items()
                        if name not in json.loads(body)["headers"])
    assert (type(envelope) is envelopes.CheckedMessage) == (isinstance(envelope, dict) and not nesting_added)


def test_an_amqp_header_nesting_past_the_limit_is_refused_by_the_connector_as_the_door_would() -> None:
    """A body within the limit whose AMQP headers table holds a field table 99 deep: the message
    nests 101 levels once merged, and the connector answers it 400 naming the header, before it
    reads a level past the bound."""
    with pytest.raises(DittoError) as raised:
        connectivity.inbound_envelope(dumps(command()).encode(), {"x-deep": nested(DEPTH - 1)}, {}, max_bytes=MAX)
    assert raised.value.error == "json.invalid" and "at </headers/x-deep/a/a" in raised.value.message


def test_only_a_reader_that_checked_the_depth_makes_a_checked_message() -> None:
    """A caller's dict is checked whatever it holds; parse_text's own value is a plain dict too."""
    with pytest.raises(DittoError):
        envelopes.load_envelope(dict(envelopes.CheckedMessage(command(nested(VALUE_DEPTH + 1)))), MAX)
    assert type(envelopes.parse_text(dumps(command()).encode(), MAX)) is dict


# --- the ledger's JSON read back: containers past the reading depth as their text -----------------------

@pytest.mark.parametrize("text, max_depth, read", [
    ('{"a": [1, {"b": 2}]}', 3, {"a": [1, {"b": 2}]}),  # within: as json.loads reads it
    ('{"a": [1, {"b": 2}]}', 2, {"a": [1, '{"b": 2}']}),  # past: the container as its text
    ('[[[]], [[1]], "x"]', 1, ['[[]]', '[[1]]', "x"]),  # each one past, its siblings as they are
    ('{"s": "[{\\"", "t": {"u": {}}}', 2, {"s": '[{"', "t": {"u": "{}"}}),  # brackets in strings are no level
    ('{"a": {"é\\\\": ["\\u2603"]}}', 2, {"a": {"é\\": '["\\u2603"]'}}),  # the text as stored, escapes kept
])
def test_json_read_back_keeps_each_container_past_the_depth_as_its_text(text: str, max_depth: int, read: Any) -> None:
    assert jsontext.loads_within(text, max_depth) == read


def test_json_read_back_past_pythons_stack_loses_nothing() -> None:
    """A value 5 000 deep (json.loads runs out of stack) is read to the depth, the rest its text."""
    value = jsontext.loads_within(nested_text(5000), limits.MAX_READ_DEPTH)
    for _ in range(limits.MAX_READ_DEPTH):
        (value,) = value.values()
    assert value == nested_text(5000 - limits.MAX_READ_DEPTH)
    assert jsontext.loads_within(nested_text(limits.MAX_READ_DEPTH), limits.MAX_READ_DEPTH) == nested(
        limits.MAX_READ_DEPTH)
