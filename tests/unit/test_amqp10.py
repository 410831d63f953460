"""B.9's AMQP 1.0 row and what an AMQP 1.0 message's parts mean to the connector, as pure rules."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings, strategies as st
from proton import UNDESCRIBED, Array, Data, Described, symbol

from ackstore.rules import amqp10, connectivity, errors, limits
from ackstore.rules.connectivity import Settling
from tests.support.deep_json import nested, nested_array

GIVE_BACK = Settling(ack=False, requeue=True, given_back=True)


@pytest.mark.parametrize(("decision", "redelivery", "outcome"), [
    ("ack", "modified", "accepted"),
    ("reject", "modified", "rejected"),  # PR #907: not redelivered to another consumer
    ("dead-letter", "modified", "rejected"),
    ("redeliver", "modified", "modified"),  # with delivery-failed: Ditto's
    ("ack", "released", "accepted"),
    ("reject", "released", "rejected"),
    ("dead-letter", "released", "rejected"),
    ("redeliver", "released", "released"),  # a broker without modified (RabbitMQ 3)
])
def test_each_settlement_decision_is_ditto_outcome(decision: str, redelivery: str, outcome: str) -> None:
    assert amqp10.outcome(connectivity.settling(decision), redelivery) == outcome


@pytest.mark.parametrize("redelivery", amqp10.REDELIVERY_OUTCOMES)
def test_an_undecided_delivery_given_back_is_released_never_counted_as_failed(redelivery: str) -> None:
    assert amqp10.outcome(GIVE_BACK, redelivery) == "released"
    assert amqp10.outcome(connectivity.CLIENT_ERROR, redelivery) == "rejected"


@pytest.mark.parametrize(("message_id", "text"), [
    ("m-1", "m-1"), (42, "42"), (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
    (b"\xffid", "\\xffid"), (None, None), ("", None),
    (b"\x00\x01id", "\\x00\x01id"),  # a binary id's 0x00 (a raw UUID's): no text holds it, its escape does
])
def test_a_message_id_of_each_amqp_type_is_text(message_id: object, text: str | None) -> None:
    assert amqp10.identifier_text(message_id) == text


def test_a_message_is_keyed_by_its_id_on_its_address_or_by_a_digest() -> None:
    assert amqp10.message_key("/amq/queue/a", "m-1", b"{}", None) == "m-1@/amq/queue/a"
    assert amqp10.message_key("/amq/queue/a", "m-1", b"{}", None) != amqp10.message_key("/amq/queue/b", "m-1", b"{}", None)
    digest = amqp10.message_key("/amq/queue/a", None, b"{}", "c")
    assert digest.startswith("sha256:") and digest == amqp10.message_key("/amq/queue/a", "", b"{}", "c")
    assert digest != amqp10.message_key("/amq/queue/b", None, b"{}", "c")


@given(st.text(), st.binary())
def test_the_same_message_again_has_the_same_key_and_another_body_another(correlation: str, body: bytes) -> None:
    key = amqp10.message_key("q", None, body, correlation)
    assert key == amqp10.message_key("q", None, body, correlation)
    assert key != amqp10.message_key("q", None, body + b"x", correlation)


@pytest.mark.parametrize(("value", "expected"), [
    ('{"a": "é"}', '{"a": "é"}'.encode()), (b"\xff", b"\xff"), (memoryview(b"ab"), b"ab"), (None, b""),
    ({"a": 1}, b"{'a': 1}"),  # an AMQP map is no Ditto Protocol text: the ledger answers it as no JSON
])
def test_a_body_is_its_bytes_whatever_section_carries_it(value: object, expected: bytes) -> None:
    assert amqp10.body(value) == expected


@pytest.mark.parametrize(("address", "node"), [
    ("events", ("events", None)), ("queue://events", ("events", "queue")), ("topic://events", ("events", "topic")),
    ("/exchange/x/rk", ("/exchange/x/rk", None)),
])
def test_a_target_address_names_its_node_and_capability(address: str, node: tuple[str, str | None]) -> None:
    assert amqp10.target_node(address) == node


def test_application_properties_become_json_headers() -> None:
    assert amqp10.application_properties({"n": 1, "f": float("nan"), "b": b"x\x00", "u": uuid.UUID(int=2)}) == {
        "n": 1, "f": None, "b": "x\ufffd", "u": "00000000-0000-0000-0000-000000000002"}
    assert amqp10.application_properties(None) == {}


@settings(deadline=None)  # the first example imports proton
@given(st.text(), st.text(), st.text())
def test_a_message_either_encodes_or_is_unencodable_never_a_failure_of_the_library(
    correlation: str, token: str, value: str
) -> None:
    """What a sender chose (its correlation id, any text in its envelope) never reaches proton's
    encoder unchecked: the message encodes, or message_for says it cannot be carried."""
    from ackstore.connectors.amqp10 import message_for
    from ackstore.connectors.transport import Unencodable

    envelope = {"topic": "org.acme/t/things/twin/events/modified", "path": "/", "value": value,
                "headers": {"correlation-id": correlation, "ack-token": token}}
    try:
        message = message_for(envelope)
    except Unencodable:
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in correlation + token + value)
        return
    assert message.encode()
    assert message.correlation_id == correlation and message.properties == {"ack-token": token}


# Measured on RabbitMQ 3.10's rabbitmq_amqp1_0 (docs/stack-notes.md): the plugin attaches the
# first group; it ends the session on each of the second ("/temp-queue/x" aborts the connection,
# "/exchange/x" routes by a subject Ditto's answers lack: a topic exchange's channel crashes).
ATTACHED = ["/queue/replies", "/queue/a b", "/amq/queue/replies", "/reply-queue/amq.rabbitmq.reply-to", "/topic/a.b",
            "/exchange/amq.direct/key", "replies", "queue://replies", "queue:///amq/queue/replies", "topic://a.b"]
REFUSED = ["/", "", "//", "/queue", "/queue/", "/queue/a/b", "/exchange", "/exchange/", "/exchange/x",
           "/exchange/x/", "/exchange/x/a/b", "/topic", "/topic/a/b", "/amq/queue", "/amq/queue/", "/amq/x/y", "/foo",
           "a/b", "/temp-queue/x", "queue://", "a\x00b", "/queue/\x00", "\ud800", "/queue/\udfff"]


@pytest.mark.parametrize("address", ATTACHED)
def test_a_reply_address_of_the_plugins_forms_is_sent_to(address: str) -> None:
    assert amqp10.reply_address_problem(address) is None


@pytest.mark.parametrize("address", REFUSED)
def test_a_reply_address_the_plugin_would_refuse_by_ending_the_session_is_refused_first(address: str) -> None:
    assert amqp10.reply_address_problem(address) in {  # the reason never holds the sender's text
        "its reply-to address holds text no UTF-8 can", "its reply-to address holds U+0000",
        "its reply-to address is none of /queue/Q, /amq/queue/Q, /reply-queue/Q, /topic/KEY, /exchange/X/KEY or a "
        "queue's name"}


# --- AMQP values nesting past the door's bound (issue 50, decisions #131) ---------------------------

def _described(levels: int, leaf: object = "x") -> object:
    value = leaf
    for _ in range(levels):
        value = Described(symbol("d"), value)
    return value


def _arrays(levels: int) -> object:
    value: object = Array(UNDESCRIBED, Data.INT, 1)
    for _ in range(levels - 1):
        value = Array(UNDESCRIBED, Data.ARRAY, value)
    return value


@pytest.mark.parametrize(("value", "levels", "within"), [
    ("x", 0, True), ([], 0, False), ([], 1, True), ({(1, (2,)): 3}, 2, False), ({(1, (2,)): 3}, 3, True),
    (nested_array(100), 100, True), (nested_array(101), 100, False), (nested(100_000), 100, False),
    (_described(100), 100, True), (_described(101), 100, False), (_arrays(100), 100, True), (_arrays(101), 100, False),
    ([_described(3, {"a": [1]})], 6, True), ([_described(3, {"a": [1]})], 5, False),
], ids=["scalar", "list at 0", "list at 1", "a compound key", "a compound key within", "100 lists", "101 lists",
        "100 000 maps", "100 described", "101 described", "100 arrays", "101 arrays", "mixed within", "mixed past"])
def test_the_nesting_of_an_amqp_value_is_counted_in_every_compound_type(value: object, levels: int,
                                                                         within: bool) -> None:
    assert amqp10.nests_within(value, levels) is within


@pytest.mark.parametrize("value", [nested_array(101), nested(101), _described(101), {"a": _described(100)},
                                   nested_array(100_000)],
                         ids=["101 lists", "101 maps", "101 described", "a map of 100 described", "100 000 lists"])
def test_a_body_nesting_past_the_bound_is_400_before_its_text_is_written(value: object) -> None:
    with pytest.raises(errors.DittoError) as raised:
        amqp10.body(value)
    assert raised.value.to_json() == errors.json_too_deep(limits.MAX_JSON_DEPTH, None).to_json()
    assert amqp10.body(nested_array(100, 1)) == ("[" * 100 + "1" + "]" * 100).encode(), "at the bound: its text"


@pytest.mark.parametrize("value", [nested(99), nested_array(99), _described(99), _arrays(99), nested(100_000)],
                         ids=["99 maps", "99 lists", "99 described", "99 arrays", "100 000 maps"])
def test_a_property_nesting_past_the_bound_is_400_naming_it(value: object) -> None:
    with pytest.raises(errors.DittoError) as raised:
        amqp10.application_properties({"plain": 1, "dee/p": value})
    assert raised.value.to_json() == errors.json_too_deep(limits.MAX_JSON_DEPTH, "/headers/dee~1p").to_json()


def test_a_property_within_the_bound_is_a_header() -> None:
    headers = amqp10.application_properties({"map": nested(98), "described": _described(98, 1)})
    assert headers["map"] == nested(98) and headers["described"].startswith("Described(symbol('d'), ")


@pytest.mark.parametrize(("problem", "error"), [
    (RecursionError("maximum recursion depth exceeded"), errors.json_too_deep(limits.MAX_JSON_DEPTH, None)),
    (ValueError("malformed"), errors.json_invalid("The AMQP 1.0 message cannot be read (ValueError).")),
])
def test_a_message_proton_cannot_read_is_answered_as_the_door_answers(problem: BaseException, error) -> None:
    assert amqp10.unreadable(problem).to_json() == error.to_json()
