"""No message stops a connector (issue 37, part 3): an answer, a result or a target's message the
protocol cannot carry is dropped with one log line and counted, and the connector goes on.

The rules of what each protocol carries (``ackstore.rules.mqtt.publish_problem``,
``ackstore.rules.amqp.publish_problem``) are checked against the libraries that
encode: what a rule lets through, paho and pika encode (to the byte count a packet takes), and
what they cannot encode, the rule refuses. Then the real brokers: the MQTT 5 message of the
issue (65 535 bytes of correlation data that answer with 196 603), a broker's Maximum Packet
Size, and a target's event whose headers MQTT cannot carry.
"""

from __future__ import annotations

import email.parser
import http.client
import json
import os
import struct
import uuid
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pika
import pika.exceptions
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from sqlalchemy import Engine, text

from ackstore.rules import amqp, mqtt
from tests.support.broker import stop, wait_for
from tests.support.ledger import count, settled, twin_command
from tests.support.mqtt_clients import Collector, mqtt_connector, publish, session_backlog
from tests.support.no_secrets import assert_no_password

EXAMPLES = int(os.environ.get("ACKSTORE_FUZZ_EXAMPLES", 150))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
LIMIT = mqtt.MAX_STRING_BYTES  # 65 535
ISSUE_37 = b"\x00\xff" * 32767 + b"\x01"  # 65 535 bytes that answer with 196 603 (each byte U+FFFD but one)


# --- the MQTT rule, and paho ---------------------------------------------------------------------

@pytest.mark.parametrize(("properties", "problem"), [
    ({"ContentType": "t" * LIMIT}, None),
    ({"ContentType": "€" * (LIMIT // 3)}, None),  # 65 535 bytes of 3-byte characters
    ({"ContentType": "t" * (LIMIT + 1)}, "ContentType: it is more than 65,535 bytes"),
    ({"ContentType": "€" * (LIMIT // 3 + 1)}, "ContentType: it is 65,538 bytes, more than 65,535"),
    ({"ContentType": "a\x00b"}, "ContentType: it holds U+0000"),
    ({"ContentType": "\x1b[2J"}, "it holds U+001B"),
    ({"ContentType": "a\x85"}, "it holds U+0085"),
    ({"ContentType": "a\ufffe"}, "it holds U+FFFE"),
    ({"ContentType": "a\U0010ffff"}, "it holds U+10FFFF"),
    ({"ContentType": "\ud800"}, "it holds U+D800"),
    ({"CorrelationData": b"\xff" * LIMIT}, None),
    ({"CorrelationData": b"\xff" * (LIMIT + 1)}, "CorrelationData: it is 65,536 bytes, more than 65,535"),
    ({"ResponseTopic": "r" * LIMIT}, None),
    ({"ResponseTopic": "r" * (LIMIT + 1)}, "ResponseTopic: it is more than 65,535 bytes"),
    ({"ResponseTopic": "replies/#"}, "ResponseTopic: it holds a wildcard"),
    ({"ResponseTopic": "replies/+/x"}, "ResponseTopic: it holds a wildcard"),
    ({"ResponseTopic": ""}, "ResponseTopic: it is no topic name"),
    ({"UserProperty": [("k" * LIMIT, "v" * LIMIT)] * 3}, None),
    ({"UserProperty": [("ack-token", "v" * (LIMIT + 1))]}, "UserProperty: it is more than 65,535 bytes"),
    ({"UserProperty": [("k\x00", "v")]}, "UserProperty: it holds U+0000"),
], ids=lambda value: repr(value)[:60] if isinstance(value, dict) else None)
def test_mqtt_properties_at_their_limit_are_carried_past_it_are_not(properties: dict, problem: str | None) -> None:
    found = mqtt.publish_problem("replies", 100, properties, qos=1)
    assert found == problem if problem is None else problem in found


@pytest.mark.parametrize(("topic", "problem"), [
    ("r" * LIMIT, None), ("é" * (LIMIT // 2), None), ("r" * (LIMIT + 1), "more than 65,535 bytes"),
    ("é" * (LIMIT // 2 + 1), "65,536 bytes"), ("", "no topic name"), ("a/#", "wildcard"), ("+", "wildcard"),
    ("a\x00", "U+0000"), ("replies/\x1b[31m", "U+001B"), ("a\x7f", "U+007F"), ("a\ufdd0", "U+FDD0"), (None, "no topic"),
])
def test_a_topic_name_is_text_of_at_most_65535_bytes_without_wildcards_or_controls(topic: Any,
                                                                                   problem: str | None) -> None:
    found = mqtt.publish_problem(topic, 0, None, qos=1)
    assert found is None if problem is None else problem in found
    assert mqtt.is_topic_name(topic) is (problem is None)


def test_a_packet_past_the_brokers_maximum_packet_size_is_refused_at_its_exact_size() -> None:
    properties = mqtt.property_values({"correlation-id": "c-1"})
    size = mqtt.packet_size("replies", 1000, properties, qos=1)
    assert mqtt.publish_problem("replies", 1000, properties, qos=1, maximum_packet_size=size) is None
    problem = mqtt.publish_problem("replies", 1001, properties, qos=1, maximum_packet_size=size)
    assert problem == f"the packet would be {size + 1:,} bytes, more than the broker's Maximum Packet Size of {size:,}"
    assert "more than MQTT's 268,435,460" in mqtt.publish_problem("r", 268_435_456, None, qos=1)


mqtt_text = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), max_size=30),
    st.text(max_size=10),  # controls, surrogates, non-characters
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "€", "😀"]), st.integers(LIMIT // 4 - 2, LIMIT + 2)),
)
mqtt_properties = st.fixed_dictionaries({}, optional={
    "ContentType": mqtt_text, "ResponseTopic": mqtt_text,
    "CorrelationData": st.one_of(st.binary(max_size=20), st.integers(LIMIT - 2, LIMIT + 2).map(lambda n: b"\xff" * n)),
    "UserProperty": st.lists(st.tuples(mqtt_text, mqtt_text), min_size=1, max_size=3),
})


@FUZZ
@given(properties=mqtt_properties, topic=mqtt_text, payload=st.integers(0, 300))
def test_what_the_mqtt_rule_lets_through_paho_packs_to_the_size_it_says(properties: dict, topic: str,
                                                                       payload: int) -> None:
    problem = mqtt.publish_problem(topic, payload, properties, qos=1)
    packed = Properties(PacketTypes.PUBLISH)
    try:
        for name, value in properties.items():
            setattr(packed, name, value)
        packed_properties = packed.pack()
        topic.encode("utf-8")
    except (struct.error, ValueError):
        assert problem is not None, "what paho cannot pack, the rule refuses"
        return
    if problem is None:
        remaining = 2 + len(topic.encode()) + 2 + len(packed_properties) + payload
        packet = 1 + len(_variable_byte_integer(remaining)) + remaining
        assert mqtt.packet_size(topic, payload, properties, qos=1) == packet


def _variable_byte_integer(value: int) -> bytes:
    out = bytearray()
    while True:
        value, digit = divmod(value, 128)
        out.append(digit | (0x80 if value else 0))
        if not value:
            return bytes(out)


# --- the AMQP 0.9.1 rule, and pika ---------------------------------------------------------------

@pytest.mark.parametrize(("routing_key", "properties", "problem"), [
    ("q" * 255, {"correlation_id": "c" * 255, "message_id": "€" * 85, "content_type": "t" * 255}, None),
    ("q" * 256, {}, "the routing key: it is more than 255 bytes"),
    ("é" * 128, {}, "the routing key: it is 256 bytes, more than 255"),
    ("\ud800", {}, "the routing key: it holds a lone surrogate"),
    ("q", {"reply_to": "r" * 256}, "the property reply_to: it is more than 255 bytes"),
    ("q", {"correlation_id": "€" * 86}, "the property correlation_id: it is 258 bytes"),
    ("q", {"message_id": "\udfff"}, "the property message_id: it holds a lone surrogate"),
    ("q", {"headers": {"k" * 255: "v" * 1_000_000}}, None),
    ("q", {"headers": {"k" * 256: 1}}, "the property headers: a name in it: it is more than 255 bytes"),
    ("q", {"headers": {"a": {"b": ["\ud800"]}}}, "a lone surrogate"),
    ("q", {"headers": {"a": [2**63 - 1, -2**63, None, True, b"\x00\xff", Decimal("12.50"),
                             datetime(2026, 1, 1, tzinfo=timezone.utc), {"n": [1]}]}}, None),
    ("q", {"headers": {"a": 2**63}}, "an integer past 64 bits"),
    ("q", {"headers": {"a": 1.5}}, "a float, which pika cannot encode"),
    ("q", {"headers": {"a": (1, 2)}}, "a tuple, which pika cannot encode"),
    ("q", {"headers": {"a": Decimal("NaN")}}, "a decimal past AMQP's"),
    ("q", {"headers": {"a": Decimal("1E+20")}}, "a decimal past AMQP's"),
    ("q", {"headers": {"a": Decimal("1E-256")}}, "a decimal past AMQP's"),
    ("q", {"headers": {"a": datetime(1969, 12, 31)}}, "a time before 1970"),
])
def test_amqp_shortstrs_and_header_tables_at_and_past_their_limits(routing_key: str, properties: dict,
                                                                   problem: str | None) -> None:
    found = amqp.publish_problem(routing_key, properties)
    assert found is None if problem is None else problem in found
    assert _pika_encodes(routing_key, properties) is (problem is None), "the rule says what pika encodes"


amqp_text = st.one_of(st.text(max_size=20), st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "€", "😀"]),
                                                       st.integers(60, 260)))
amqp_values = st.recursive(
    st.one_of(st.none(), st.booleans(), amqp_text, st.binary(max_size=10), st.integers(-2**64, 2**64),
              st.floats(allow_nan=False), st.decimals(min_value=-10**12, max_value=10**12),
              st.sampled_from([Decimal("NaN"), Decimal("sNaN"), Decimal("-Infinity"), Decimal("1E-256"),
                               Decimal("1E+20"), Decimal("2147483647"), Decimal("214748.3648")]),
              st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1))),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(amqp_text, inner, max_size=3)), max_leaves=6)


@FUZZ
@given(routing_key=amqp_text, correlation_id=st.none() | amqp_text,
       headers=st.none() | st.dictionaries(amqp_text, amqp_values, max_size=4))
def test_what_the_amqp_rule_lets_through_pika_encodes_and_nothing_else(routing_key: str, correlation_id: str | None,
                                                                      headers: dict | None) -> None:
    properties = {"correlation_id": correlation_id, "headers": headers}
    allowed = amqp.publish_problem(routing_key, properties) is None
    assert allowed is _pika_encodes(routing_key, properties)


def _pika_encodes(routing_key: str, properties: dict) -> bool:
    try:
        pika.spec.Basic.Publish(exchange="", routing_key=routing_key).encode()
        pika.BasicProperties(**properties).encode()
    except (struct.error, ValueError, TypeError, ArithmeticError, pika.exceptions.ShortStringTooLong,
            pika.exceptions.UnsupportedAMQPFieldException):
        return False
    return True


# --- the HTTP push rule, and http.client (issue 50) ------------------------------------------------

header_text = st.one_of(
    st.text(max_size=12),  # controls, CR LF, surrogates, non-ASCII
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=30),
    st.text(st.characters(min_codepoint=0x00, max_codepoint=0xff), max_size=12),  # Latin-1, which http.client sends
)


@FUZZ
@given(value=header_text)
def test_what_the_http_push_rule_lets_through_http_client_sends_as_it_is(value: str) -> None:
    """A correlation id the rule lets through, http.client sends byte for byte, and a receiver
    reads back the same text; whatever http.client refuses (CR LF, past Latin-1), the rule
    refuses — and Latin-1 besides, which a receiver may read in another charset."""
    from ackstore.rules import http_push

    allowed = http_push.header_problem("correlation-id", value) is None
    connection = http.client.HTTPConnection("127.0.0.1", 1)  # buffers the request: nothing is sent
    connection.putrequest("POST", "/events", skip_host=True, skip_accept_encoding=True)
    try:
        connection.putheader("correlation-id", value)
    except (ValueError, UnicodeEncodeError):
        assert not allowed, "what http.client refuses, the rule refuses"
        return
    if allowed:
        sent = connection._buffer[-1]
        assert sent == b"correlation-id: " + value.encode("ascii")
        assert email.parser.HeaderParser().parsestr(f"correlation-id: {sent[16:].decode()}\n\n")[
            "correlation-id"] == value, "read back as it was sent"


# --- the real brokers ----------------------------------------------------------------------------

def names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"mq-{tag}", f"plant-{tag}/commands"


def good(n: int, **headers: Any) -> dict:
    return twin_command("modify", thing=f"org.acme/u{n}", path="/", value={"attributes": {"n": n}},
                        correlation_id=f"c-{n}", **headers)


def _once(database_url: str, url: str, *args: str) -> tuple[int, str]:
    process = mqtt_connector(database_url, url, *args, "--once")
    _, log = process.communicate(timeout=120)
    assert_no_password(log)
    return process.returncode, log


@pytest.mark.slow
def test_the_mqtt5_message_of_issue_37_is_answered_by_nobody_and_stops_nothing(
    tmp_path, engine: Engine, database_url: str, own_mosquitto
) -> None:
    """65 535 bytes of correlation data, no UTF-8: the ledger answers 400 header.invalid with a
    correlation id of 196 603 bytes, which no MQTT 5 property holds. The answer is dropped (one
    line, counted), the message PUBACKed (a client error), and the connector — still running —
    stores the message after it."""
    connection, topic = names()
    replies = f"{topic}/replies"
    args = ("--connection-id", connection, "--topic", topic, "--poll", "0.5")
    assert _once(database_url, own_mosquitto.url, *args)[0] == 0  # the session, subscribed
    issue = good(2, requested_acks=[])
    del issue["headers"]["correlation-id"]
    collector = Collector(own_mosquitto.url, replies)
    log_path = tmp_path / "connector.log"
    with open(log_path, "w") as log_file:
        process = mqtt_connector(database_url, own_mosquitto.url, *args, log=log_file)
        try:
            wait_for(lambda: "consuming" in log_path.read_text(), what="the connector subscribed")
            publish(own_mosquitto.url, topic, [good(1, requested_acks=[]),
                                               (issue, {"CorrelationData": ISSUE_37, "ResponseTopic": replies})])
            wait_for(lambda: "unsendable 1" in log_path.read_text(), what="the answer dropped")
            publish(own_mosquitto.url, topic, [good(3, requested_acks=[])], response_topic=replies)
            wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 2, what="the next message stored")
            assert process.poll() is None, "still running"
        finally:
            code, _ = stop(process)
            collector.close()
    log = log_path.read_text()
    assert code == 0, log
    assert "Traceback" not in log and "reconnects 0; unsendable 1" in log
    (said,) = [line for line in log.splitlines() if "is dropped" in line]
    assert f"connector {connection}: the answer to '{replies}' is dropped, mqtt-5 cannot carry it: the property " \
           "CorrelationData: it is 196,603 bytes, more than 65,535" in said
    assert collector.messages == [], "nothing was published for it"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT correlation_id FROM signals ORDER BY 1")).scalars().all() == ["c-1", "c-3"]
    assert session_backlog(own_mosquitto.url, connection, topic) == [], "the refused one PUBACKed too"


@pytest.mark.slow
def test_an_answer_past_the_brokers_maximum_packet_size_is_dropped_not_sent(tmp_path, engine: Engine,
                                                                           database_url: str) -> None:
    """Mosquitto's max_packet_size (its CONNACK says it to MQTT 5 clients) closes the connection
    of a client that sends a larger packet. A 1 000-byte correlation data that is no UTF-8 answers
    with 3 000 bytes twice over (the property and the JSON): past 4 096, it is dropped, and the
    connector never loses its session for it."""
    from tests.support.own_mosquitto import OwnMosquitto

    connection, topic = names()
    replies = f"{topic}/replies"
    args = ("--connection-id", connection, "--topic", topic, "--poll", "0.5")
    large = good(2, requested_acks=[])
    del large["headers"]["correlation-id"]
    with OwnMosquitto(max_packet_size=4096) as broker:
        assert _once(database_url, broker.url, *args)[0] == 0
        collector = Collector(broker.url, replies)
        try:
            publish(broker.url, topic, [good(1, requested_acks=["not a label!"]),
                                        (large, {"CorrelationData": b"\xff" * 1000}),
                                        good(3, requested_acks=["not a label!"])], response_topic=replies)
            code, log = _once(database_url, broker.url, *args)
            wait_for(lambda: len(collector.messages) == 2, what="the two answers that fit")
        finally:
            collector.close()
    assert code == 0, log
    assert "dropped 3," in log and "reconnects 0; unsendable 1" in log and "Traceback" not in log
    assert "more than the broker's Maximum Packet Size of 4,096" in log
    assert sorted(m.properties.CorrelationData for m in collector.messages) == [b"c-1", b"c-3"]


@pytest.mark.slow
@pytest.mark.spark
def test_a_target_message_mqtt_cannot_carry_is_dropped_and_its_label_issued_400(
    tmp_path, engine: Engine, database_url: str, own_mosquitto, run_pipeline
) -> None:
    """A signal's own headers go out as MQTT 5 properties of the target's event: a content type
    past 65 535 bytes cannot (paho raised, and the targets' thread stopped the connector). The
    event is dropped, said once, and the target's label issued 400: the signal is rejected, never
    redelivered nor pulled again; the event beside it is published and acknowledged 200."""
    connection, topic = names()
    events = f"{topic}/events"
    label = f"{connection}:published"
    document = {
        "id": connection, "connectionType": "mqtt-5", "uri": own_mosquitto.url,
        "sources": [{"addresses": [topic], "qos": 1, "acknowledgementRequests": {"includes": ["twin-persisted"]}}],
        "targets": [{"address": events, "topics": ["_/_/things/twin/events?namespaces=org.acme"], "qos": 1,
                     "issuedAcknowledgementLabel": "{{connection:id}}:published"}],
    }
    config = tmp_path / "connection.json"
    config.write_text(json.dumps(document))
    assert _once(database_url, own_mosquitto.url, "--config", str(config))[0] == 0
    collector = Collector(own_mosquitto.url, events)
    log_path = tmp_path / "connector.log"
    with open(log_path, "w") as log_file:
        process = mqtt_connector(database_url, own_mosquitto.url, "--config", str(config), "--poll", "0.5",
                                 log=log_file)
        try:
            publish(own_mosquitto.url, topic, [good(1, requested_acks=[label]),
                                               good(2, requested_acks=[label], content_type="t" * (LIMIT + 1))])
            wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 2, what="both stored")
            run_pipeline("apply_twin")
            wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label = :l", l=label) == 2,
                     what="the target's two acks")
            run_pipeline()
            wait_for(lambda: settled(engine) == {"ack": 1, "reject": 1}, what="both decisions carried out")
            assert process.poll() is None, "still running"
        finally:
            code, _ = stop(process)
            collector.close()
    log = log_path.read_text()
    assert code == 0, log
    assert "Traceback" not in log and "unsendable 1" in log
    (said,) = [line for line in log.splitlines() if "is dropped" in line]
    assert f"the message 'c-2' to the target '{events}' is dropped, mqtt-5 cannot carry it: the property " \
           "ContentType: it is more than 65,535 bytes" in said
    with engine.connect() as conn:
        acks = dict(conn.execute(text("SELECT s.correlation_id, a.status FROM acks a "
                                      "JOIN signals s ON s.id = a.signal_id WHERE a.label = :l"), {"l": label}).all())
    assert acks == {"c-1": 200, "c-2": 400}
    (event,) = collector.messages
    assert json.loads(event.payload)["headers"]["correlation-id"] == "c-1"
