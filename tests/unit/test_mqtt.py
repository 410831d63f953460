"""MQTT's pure rules (ackstore/rules/mqtt.py, ackstore/rules/enforcement.py): B.9's MQTT row,
the message key, the header mapping, broker URLs and a source's enforcement."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ackstore.rules import mqtt
from ackstore.rules.connectivity import Settling
from ackstore.rules.enforcement import Enforcement
from ackstore.rules.errors import DittoError

PUBACK, WITHHELD = Settling(ack=True), Settling(ack=False, requeue=True)


@pytest.mark.parametrize(("decision", "reconnect", "disposition", "carried_out_as"), [
    ("ack", False, PUBACK, None),
    ("ack", True, PUBACK, None),
    ("reject", False, PUBACK, None),  # MQTT has no nack: what was decided is in the ledger
    ("reject", True, PUBACK, None),
    ("dead-letter", False, PUBACK, None),
    ("dead-letter", True, PUBACK, None),
    ("redeliver", True, WITHHELD, None),  # no PUBACK; a reconnect makes the broker send it again
    ("redeliver", False, PUBACK, "ack"),  # Ditto's default: PUBACKed anyway, and recorded so
])
def test_b9_mqtt_row(decision: str, reconnect: bool, disposition: Settling, carried_out_as: str | None) -> None:
    assert mqtt.disposition(decision, reconnect) == disposition
    assert mqtt.carried_out_as(decision, reconnect) == carried_out_as


@given(st.text(), st.text(), st.binary())
def test_a_copy_has_the_key_of_its_original_and_any_change_gives_another(topic: str, correlation: str,
                                                                       payload: bytes) -> None:
    key = mqtt.message_key(topic, None, correlation, payload)
    assert key != mqtt.message_key(topic + "x", None, correlation, payload)
    assert key != mqtt.message_key(topic, None, correlation + "x", payload)
    assert key != mqtt.message_key(topic, None, correlation, payload + b"x")
    assert mqtt.message_key(topic + "a", None, correlation, payload) != mqtt.message_key(topic, None, "a" + correlation, payload)


def test_a_message_id_user_property_names_a_message_on_its_topic() -> None:
    assert mqtt.message_key("t", "m-1", "c", b"{}") == mqtt.message_key("t", "m-1", "other", b"[]")
    assert mqtt.message_key("t", "m-1", "c", b"{}") != mqtt.message_key("u", "m-1", "c", b"{}")


def test_mqtt5_properties_become_headers_and_the_envelopes_own_win_later() -> None:
    headers, fields = mqtt.inbound([("Device", "d1"), ("device", "ignored"), ("message-id", "m-9"), ("x", "a\x00b")],
                                   "application/json", b"corr-1", "replies/1")
    assert headers == {"device": "d1", "message-id": "m-9", "x": "a\ufffdb"}
    assert fields == {"correlation_id": "corr-1", "reply_to": "replies/1", "content_type": "application/json",
                      "message_id": "m-9"}
    assert mqtt.inbound(None, None, None, None) == ({}, {"correlation_id": None, "reply_to": None,
                                                         "content_type": None, "message_id": None})


def test_outbound_properties_carry_the_correlation_id_reply_to_and_ack_token() -> None:
    assert mqtt.outbound({"correlation-id": "c", "reply-to": "r", "ack-token": "t"}) == {
        "content_type": "", "correlation_data": b"c", "response_topic": "r", "user_properties": [("ack-token", "t")]}


@pytest.mark.parametrize(("url", "address"), [
    ("mqtt://127.0.0.1", mqtt.BrokerAddress("127.0.0.1", 1883, False)),
    ("tcp://broker:1884", mqtt.BrokerAddress("broker", 1884, False)),
    ("mqtts://broker", mqtt.BrokerAddress("broker", 8883, True)),
    ("ssl://u:p%40ss@broker:8884/", mqtt.BrokerAddress("broker", 8884, True, "u", "p@ss")),
    ("mqtt://user@[::1]:1883", mqtt.BrokerAddress("::1", 1883, False, "user")),
])
def test_broker_urls(url: str, address: mqtt.BrokerAddress) -> None:
    assert mqtt.broker_address(url) == address


@pytest.mark.parametrize("url", ["amqp://x", "mqtt://", "mqtt://h:99999", "mqtt://h/path", "mqtt://u:secret@h?x=1"])
def test_a_bad_broker_url_is_a_400_without_its_password(url: str) -> None:
    with pytest.raises(DittoError) as raised:
        mqtt.broker_address(url)
    assert raised.value.status == 400 and "secret" not in raised.value.message


@pytest.mark.parametrize(("input_text", "filters", "address", "headers", "thing", "allowed"), [
    ("{{ source:address }}", ("devices/{{ thing:id }}",), "devices/org.acme:t1", None, "org.acme:t1", True),
    ("{{source:address}}", ("devices/{{ thing:id }}",), "devices/org.acme:t2", None, "org.acme:t1", False),
    ("{{ source:address }}", ("d/{{ thing:namespace }}/{{ thing:name }}",), "d/org.acme/t1", None, "org.acme:t1", True),
    ("{{ source:address }}", ("a/{{ thing:name }}", "b/{{ thing:name }}"), "b/t1", None, "org.acme:t1", True),
    ("{{ header:Device-Id }}", ("{{ thing:id }}",), "q", {"device-id": "org.acme:t1"}, "org.acme:t1", True),
    ("{{ header:device-id }}", ("{{ thing:id }}",), "q", {"Device-ID": "org.acme:t9"}, "org.acme:t1", False),
    ("{{ header:device-id }}", ("{{ thing:id }}",), "q", None, "org.acme:t1", False),  # MQTT 3.1.1: no headers
])
def test_enforcement(input_text: str, filters: tuple[str, ...], address: str, headers, thing: str, allowed: bool) -> None:
    enforcement = Enforcement.parse(input_text, filters)
    assert enforcement.allows(enforcement.input_of(address, headers), thing) is allowed


@pytest.mark.parametrize(("input_text", "filters"), [
    ("devices/x", ("{{ thing:id }}",)), ("{{ thing:id }}", ("{{ thing:id }}",)), ("{{ header: }}", ("x",)),
    ("{{ source:address }}", ()), ("{{ source:address }}", ("{{ thing:policy }}",)),
    ("{{ source:address }}", ("{{ thing:id | fn:lower() }}",)),  # functions are not supported
])
def test_an_invalid_enforcement_says_why(input_text: str, filters: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        Enforcement.parse(input_text, filters)


@pytest.mark.parametrize(("topic", "publishable"), [
    ("replies/1", True), ("r", True), ("", False), ("replies/+", False), ("replies/#", False), ("a\x00b", False),
    ("x" * 65536, False), (None, False), (7, False),
])
def test_a_reply_to_is_published_only_when_it_is_a_topic_name(topic, publishable: bool) -> None:
    assert mqtt.is_topic_name(topic) is publishable
