"""The pure rules of a broker connection: mapping, keys, dispositions, issued acks, timeouts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackstore.rules import connectivity, envelopes, errors, jsontext, limits, wire
from ackstore.rules.connectivity import Settling
from tests.support.deep_json import nested, nested_array

MAX = 1024 * 1024


@pytest.mark.parametrize(
    ("requested", "includes", "expected"),
    [
        (None, ["twin-persisted"], ["twin-persisted"]),  # absent: the includes
        (None, [], None),  # absent, nothing to add: stays absent (B.7's defaults apply)
        ([], ["twin-persisted"], []),  # an explicit empty list wins
        ("", ["twin-persisted"], ""),
        ("[]", ["twin-persisted"], "[]"),
        (["a:b1"], ["twin-persisted"], ["a:b1", "twin-persisted"]),
        (["twin-persisted"], ["twin-persisted"], ["twin-persisted"]),  # no duplicates
        ("a:b1, a:b2", ["twin-persisted"], ["a:b1", "a:b2", "twin-persisted"]),
        ('["a:b1"]', ["twin-persisted"], ["a:b1", "twin-persisted"]),
        ('["a:b1"]', [], '["a:b1"]'),
        (42, ["twin-persisted"], 42),  # not a list: validation answers it (400)
    ],
)
def test_source_includes_are_added_to_requested_acks(requested, includes, expected) -> None:
    assert connectivity.requested_with_includes(requested, includes) == expected


def test_inbound_headers_come_from_the_body_first_then_the_amqp_headers_then_the_properties() -> None:
    body = json.dumps({"topic": "o/t/things/twin/commands/modify", "path": "/", "value": {},
                       "headers": {"Correlation-Id": "from-body"}}).encode()
    envelope = connectivity.inbound_envelope(
        body, {"correlation-id": "from-table", "x-custom": b"bytes"},
        {"correlation_id": "from-property", "reply_to": "replies", "content_type": None, "message_id": "m1"},
        includes=["twin-persisted"], max_bytes=MAX,
    )
    assert envelope["headers"] == {
        "correlation-id": "from-body", "x-custom": "bytes", "reply-to": "replies", "message-id": "m1",
        "requested-acks": ["twin-persisted"],
    }


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"headers": 3}', b"\xff", b" " * (MAX + 1)])
def test_bodies_that_are_no_envelope_are_passed_on_for_the_ledger_to_answer(body: bytes) -> None:
    assert connectivity.inbound_envelope(body, None, {}, includes=["twin-persisted"], max_bytes=MAX) is body


@pytest.mark.parametrize(
    ("decision", "disposition"),
    [
        ("ack", Settling(ack=True)),  # basic.ack
        ("reject", Settling(ack=False, requeue=False)),  # basic.nack, requeue=false
        ("dead-letter", Settling(ack=False, requeue=False)),  # attempts used up (A.2.10)
        ("redeliver", Settling(ack=False, requeue=True)),  # basic.nack, requeue=true
    ],
)
def test_b9_amqp_rows(decision: str, disposition: Settling) -> None:
    assert connectivity.settling(decision) == disposition


@pytest.mark.parametrize(("confirmed", "status"), [(True, 200), (False, 503), (None, 400)])
def test_target_issued_ack_status_from_the_broker(confirmed, status) -> None:
    assert connectivity.issued_ack_status(confirmed) == status


@pytest.mark.parametrize(
    ("max_timeout_ms", "interval_ms", "consumer_timeout_ms", "warns"),
    [
        (20 * 60_000, 60_000, 30 * 60_000, False),  # the defaults: 22 of 30 minutes
        (25 * 60_000, 60_000, 30 * 60_000, True),
        (20 * 60_000, 5 * 60_000, 30 * 60_000, True),
        (60 * 60_000, 60_000, 2 * 60 * 60_000, False),
    ],
)
def test_a_consumer_timeout_too_close_to_the_maximum_timeout_warns(
    max_timeout_ms, interval_ms, consumer_timeout_ms, warns
) -> None:
    warning = connectivity.consumer_timeout_warning(max_timeout_ms, interval_ms, consumer_timeout_ms)
    assert (warning is not None) == warns


@pytest.mark.parametrize(
    ("topic", "is_ack"),
    [("o/t/things/twin/acks/x:y1", True), ("o/t/things/live/acks", True),
     ("o/t/things/twin/commands/modify", False), ("nonsense", False)],
)
def test_acknowledgements_are_told_from_signals(topic: str, is_ack: bool) -> None:
    assert envelopes.read_topic(topic).is_acknowledgement is is_ack
    assert connectivity.is_acknowledgement({"topic": topic}) is is_ack


# --- the merged envelope measured once, by its reader (issue 51) ------------------------------------

_texts = st.one_of(st.text(max_size=30), st.sampled_from(["c\x00", "\ud800", "é" * 40, "\x1b[2J", "1e16"]))
_numbers = st.one_of(st.integers(), st.floats(), st.sampled_from([1e16, 1e-7, 10 ** 30, -(2 ** 63)]))
_bodies = st.builds(
    lambda topic, headers, value: json.dumps({"topic": topic, "headers": headers, "path": "/attributes/x",
                                              "value": value}, ensure_ascii=False).encode("utf-8", "surrogatepass"),
    st.sampled_from(["org.acme/t/things/twin/commands/modify", "org.acme/t/things/live/acks/a:b"]),
    st.dictionaries(st.sampled_from(["correlation-id", "Reply-To", "İ-x", "requested-acks"]), _texts | _numbers,
                    max_size=3),
    st.one_of(_texts, _numbers, st.lists(_texts | _numbers, max_size=30)))


@settings(max_examples=400, deadline=None)
@given(body=_bodies, transport_headers=st.dictionaries(st.sampled_from(["X-A", "reply-to", "x-b"]),
                                                       _texts | _numbers | st.binary(max_size=8), max_size=3),
       properties=st.dictionaries(st.sampled_from(["correlation_id", "reply_to", "message_id"]), _texts, max_size=3),
       includes=st.sampled_from([(), ("twin-persisted",)]), max_bytes=st.integers(60, 3000))
def test_a_brokers_envelope_measured_by_its_reader_is_answered_as_the_ledger_measures_it(
    body: bytes, transport_headers: dict, properties: dict, includes: tuple, max_bytes: int
) -> None:
    """``inbound_envelope`` bounds the merged envelope's text (``size_bound``) so that the ledger
    need not encode it again to measure it: the bound holds (the ledger's encoding takes it and is
    no longer), and the ledger answers the envelope — 413 with its size, 400, or accepted —
    exactly as it answers the same dict, measured whole."""
    try:
        envelope = connectivity.inbound_envelope(body, transport_headers, properties, includes=includes,
                                                 max_bytes=max_bytes)
    except errors.DittoError:
        return  # a header the door refuses: answered by the reader
    if type(envelope) is not envelopes.CheckedMessage:
        return
    if envelope.size_bound is not None:
        assert len(envelopes.canonical_json(envelope).encode()) <= envelope.size_bound

    def answer(message: object) -> object:
        try:
            return envelopes.load_envelope(message, max_bytes)
        except errors.DittoError as error:
            return error.to_json()

    assert answer(envelope) == answer(dict(envelope))


def test_a_plain_brokers_envelope_is_not_encoded_again_to_be_measured() -> None:
    """The common message (a plain body, the transport's properties) carries its bound."""
    body = json.dumps({"topic": "org.acme/t/things/twin/commands/modify", "headers": {"correlation-id": "c"},
                       "path": "/attributes/x", "value": 1}).encode()
    envelope = connectivity.inbound_envelope(body, {"x-a": "v"}, {"message_id": "m-1"}, includes=("twin-persisted",),
                                             max_bytes=MAX)
    assert type(envelope) is envelopes.CheckedMessage and envelope.size_bound is not None
    assert len(envelopes.canonical_json(envelope).encode()) <= envelope.size_bound <= MAX
    assert envelopes.load_envelope(envelope, MAX) is envelope


def test_the_error_published_to_reply_to_is_a_ditto_protocol_error() -> None:
    error = {"status": 400, "error": "json.invalid", "message": "m"}
    assert wire.error_message(error, thing_id="org.acme:t", channel="twin", correlation_id="c") == {
        "topic": "org.acme/t/things/twin/errors", "path": "/", "status": 400, "value": error,
        "headers": {"content-type": wire.DITTO_CONTENT_TYPE, "correlation-id": "c"},
    }
    assert wire.error_message(error, thing_id=None, channel="twin", correlation_id=None)["topic"] == "_/_/things/twin/errors"


@pytest.mark.parametrize(
    ("cause", "status", "body", "ack_statuses", "topic", "value"),
    [
        ("response", 204, None, {}, "org.acme/t/things/twin/commands/modify", None),
        ("acks", 424, {"a:b1": {"status": 408}, "twin-persisted": {"status": 204}}, {"a:b1": 408, "twin-persisted": 204},
         "org.acme/t/things/twin/acks", {"a:b1": {"status": 408}, "twin-persisted": {"status": 204}}),
        ("acks", 200, "done", {"a:b1": 200}, "org.acme/t/things/twin/acks",
         {"a:b1": {"status": 200, "payload": "done", "headers": {"correlation-id": "c"}}}),
        ("error", 404, {"status": 404, "error": "things:thing.notfound"}, {}, "org.acme/t/things/twin/errors",
         {"status": 404, "error": "things:thing.notfound"}),
    ],
)
def test_a_decided_result_is_published_in_its_ditto_protocol_shape(cause, status, body, ack_statuses, topic, value) -> None:
    message = wire.result_message(thing_id="org.acme:t", channel="twin", topic="org.acme/t/things/twin/commands/modify",
                                  path="/", correlation_id="c", cause=cause, status=status, body=body,
                                  ack_statuses=ack_statuses)
    assert message["topic"] == topic and message["status"] == status
    assert message.get("value") == value
    assert message["headers"]["correlation-id"] == "c"


# --- a header nesting past the door's bound (issue 50, decisions #131) ------------------------------

ENVELOPE = {"topic": "o/t/things/twin/commands/modify", "path": "/", "value": {}}


def _with_header(value: object) -> dict | bytes:
    return connectivity.inbound_envelope(json.dumps(ENVELOPE).encode(), {"Deep": value}, {}, max_bytes=MAX)


@pytest.mark.parametrize(("value", "refused_at"), [
    (nested(98), None),  # the envelope 100 levels deep: the door's bound, its last level
    (nested_array(98), None),
    ({"x": [1, nested(96)]}, None),
    (nested(99), "/headers/deep" + "/a" * 98),
    (nested_array(99), "/headers/deep" + "/0" * 98),
    ({"x": [1, nested(97)]}, "/headers/deep/x/1" + "/a" * 96),
    ({"a/b~c": nested(98)}, "/headers/deep/a~1b~0c" + "/a" * 97),
    (nested(5000), "/headers/deep" + "/a" * 98),  # read no further than the bound
    (connectivity.UNREAD, "/headers/deep"),  # what pika could not read (connectors/amqp.py)
    ({"plain": 1, "inner": connectivity.UNREAD}, "/headers/deep/inner"),
], ids=["98 objects", "98 arrays", "mixed at the bound", "99 objects", "99 arrays", "mixed past the bound",
        "escaped names", "5 000 objects", "unread", "unread inside"])
def test_a_header_nesting_past_the_door_s_bound_is_400_naming_it_as_the_door_would(value, refused_at) -> None:
    if refused_at is None:
        envelope = _with_header(value)
        assert isinstance(envelope, dict) and envelope["headers"]["deep"] == value
        limits.check_json_depth(envelope)  # the door takes it
        return
    with pytest.raises(errors.DittoError) as raised:
        _with_header(value)
    assert raised.value.to_json() == errors.json_too_deep(limits.MAX_JSON_DEPTH, refused_at).to_json()


def _nesting(choices: list[bool]) -> object:
    """Containers one in another, an object where ``choices`` says so, else an array."""
    value: object = "leaf"
    for is_object in choices:
        value = {"k": value} if is_object else [0, value]
    return value


@settings(max_examples=200)
@given(st.lists(st.booleans(), max_size=300), st.sampled_from(["", "/headers/h", "/a/b/c"]))
def test_a_header_value_is_refused_exactly_where_the_door_refuses_it(choices: list[bool], at: str) -> None:
    """The mapping reads a header as the door would take it there: as it is within the bound,
    else the door's own answer, naming the first container too deep — whatever the nesting."""
    value = _nesting(choices)
    placed: object = value
    for segment in reversed(at.split("/")[1:]):
        placed = {segment: placed}
    door = jsontext.too_deep(placed, limits.MAX_JSON_DEPTH)
    if door is None:
        assert connectivity.header_json(value, at) == value
    else:
        with pytest.raises(errors.DittoError) as raised:
            connectivity.header_json(value, at)
        assert raised.value.to_json() == errors.json_too_deep(limits.MAX_JSON_DEPTH, door).to_json()
