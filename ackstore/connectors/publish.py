"""``ackstore publish amqp|mqtt|amqp10``: send Ditto Protocol messages to a queue (with publisher
confirms), an MQTT topic (QoS 1, each PUBACKed) or an AMQP 1.0 address (each settled by the
broker's outcome: published when accepted).

One JSON message per line. On AMQP each gets a fresh ``message_id`` unless its headers carry a
``message-id``; its ``correlation-id`` and ``reply-to`` headers become the AMQP properties of
the same name. On MQTT 5 its ``correlation-id`` becomes correlation data, its ``reply-to`` the
response topic and its ``message-id`` a user property; MQTT 3.1.1 sends the line alone. On AMQP
1.0 the line is the message's ``data`` section (its bytes as they are), with properties as on
AMQP 0.9.1. A line that is not JSON is sent as it is (useful to test rejections). A line whose
headers the protocol cannot carry (a ``message-id`` past AMQP's 255 bytes, a correlation id past MQTT 5's 65 535) is
not sent, and counted as refused.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any, Iterable


import pika
from pika.exceptions import NackError, UnroutableError

from ackstore.connectors.transport import Unencodable
from ackstore.rules import amqp, errors, wire

PUBACK_WAIT_S = 60.0
AMQP10_WINDOW = 1000  # AMQP 1.0 messages sent before their outcomes are read


def _headers(line: bytes) -> dict[str, Any]:
    """The line's Ditto headers (names in lower case), if it is an envelope."""
    try:
        envelope = errors.parse_json_text(line)
    except errors.DittoError:
        return {}
    if isinstance(envelope, dict) and isinstance(envelope.get("headers"), dict):
        return {str(k).lower(): v for k, v in envelope["headers"].items()}
    return {}


def _text(headers: dict[str, Any], name: str) -> str | None:
    """A header a line's envelope carries as non-empty text, if it does."""
    value = headers.get(name)
    return value if isinstance(value, str) and value else None


def _properties(queue: str, line: bytes) -> pika.BasicProperties:
    """The AMQP properties of a line; :class:`Unencodable` when AMQP 0.9.1 cannot carry them."""
    headers = _headers(line)
    properties = {"message_id": _text(headers, "message-id") or uuid.uuid4().hex,
                  "correlation_id": _text(headers, "correlation-id"), "reply_to": _text(headers, "reply-to"),
                  "content_type": wire.DITTO_CONTENT_TYPE}
    problem = amqp.publish_problem(queue, properties)
    if problem is not None:
        raise Unencodable(problem)
    return pika.BasicProperties(delivery_mode=2, **properties)  # persistent


def publish_lines(url: str, queue: str, lines: Iterable[bytes]) -> dict[str, Any]:
    """Publish every non-empty line to ``queue``; the answer counts what the broker confirmed, and
    says why it refused the others (issue 50: a queue that does not exist was "refused 1")."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    published = 0
    reasons: Counter[str] = Counter()
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for line in lines:
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                channel.basic_publish("", queue, line, _properties(queue, line), mandatory=True)
                published += 1
            except UnroutableError:  # the default exchange routes to a queue of that name alone
                reasons[f"no queue '{errors.shown(queue, 100)}' exists on the broker to take it"] += 1
            except NackError:
                reasons["the broker did not confirm it (nack)"] += 1
            except Unencodable as problem:
                reasons[str(problem)] += 1
    finally:
        connection.close()
    counts = {"queue": queue, "published": published, "refused": sum(reasons.values())}
    return {"status": 200, **counts} if not reasons else {**errors.publish_refused(reasons).to_json(), **counts}


def publish_mqtt_lines(url: str, topic: str, lines: Iterable[bytes], connection_type: str) -> dict[str, Any]:
    """Publish every non-empty line to ``topic`` at QoS 1, at most a window of them awaiting
    their PUBACK (packet ids are 16 bits); the answer counts the PUBACKs. On MQTT 5 each line
    gets a fresh ``message-id`` unless its headers carry one, as on AMQP."""
    from ackstore.connectors.mqtt import PUBLISH_WINDOW, MqttLost, client_for, open_connection, publishable

    client = client_for(url, f"ackstore-publish-{uuid.uuid4().hex[:12]}", version5=connection_type == "mqtt-5",
                        persistent=False, manual_ack=False)
    answered: dict[int, bool] = {}
    client.on_publish = lambda _c, _u, mid, reason, _p: answered.__setitem__(mid, not reason.is_failure)
    try:
        connack = open_connection(client, url, keep_alive_s=60, persistent=False)
    except MqttLost as problem:
        return _broker_unavailable(str(problem))
    client.loop_start()
    published = refused = 0
    waiting: list[Any] = []
    try:
        for line in lines:
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            headers = _headers(line)
            message_id = headers.get("message-id") if isinstance(headers.get("message-id"), str) else None
            try:
                properties = publishable(client, topic, line, headers, qos=1, message_id=message_id or uuid.uuid4().hex,
                                         maximum_packet_size=connack.maximum_packet_size)
            except Unencodable:
                refused += 1
                continue
            waiting.append(client.publish(topic, line, qos=1, properties=properties))
            if len(waiting) >= PUBLISH_WINDOW:
                published, refused = _answered(waiting, answered, published, refused)
        published, refused = _answered(waiting, answered, published, refused)
    finally:
        client.disconnect()
        client.loop_stop()
    return {"status": 200 if not refused else 503, "topic": topic, "published": published, "refused": refused}


def _answered(waiting: list[Any], answered: dict[int, bool], published: int, refused: int) -> tuple[int, int]:
    """Wait for every publish in ``waiting`` to be PUBACKed (or not, in time), and count them."""
    deadline = time.monotonic() + PUBACK_WAIT_S
    for info in waiting:  # a packet id is answered once before it is used again (the window)
        while info.mid not in answered and time.monotonic() < deadline:
            time.sleep(0.005)
        if answered.pop(info.mid, False):
            published += 1
        else:
            refused += 1
    waiting.clear()
    return published, refused


def publish_amqp10_lines(url: str, address: str, lines: Iterable[bytes]) -> dict[str, Any]:
    """Send every non-empty line to ``address`` and wait for the broker's outcome of each; the
    answer counts those it accepted as published."""
    from proton import Message

    from ackstore.connectors.amqp10 import Amqp10Lost, ProtonConnection

    outcomes: list[bool] = []
    try:
        connection = ProtonConnection(url, f"ackstore-publish-{uuid.uuid4().hex[:12]}",
                                      outcome=lambda _delivery, accepted: outcomes.append(accepted))
    except Amqp10Lost as problem:
        return _broker_unavailable(str(problem), "AMQP 1.0")
    sent = 0
    try:
        sender = connection.sender(address, "ackstore publish")
        connection.wait(lambda: connection.attached(sender), "attaching the link")
        for line in lines:
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            headers = _headers(line)
            sender.send(Message(body=line, id=_text(headers, "message-id") or uuid.uuid4().hex, durable=True,
                                correlation_id=_text(headers, "correlation-id"), reply_to=_text(headers, "reply-to"),
                                content_type=wire.DITTO_CONTENT_TYPE))
            sent += 1
            if sent - len(outcomes) >= AMQP10_WINDOW:
                connection.step(0)
        connection.wait(lambda: len(outcomes) >= sent, "the broker's outcomes", timeout=PUBACK_WAIT_S)
    except Amqp10Lost as problem:  # what was not accepted by then counts as refused
        if not outcomes:
            return _broker_unavailable(str(problem), "AMQP 1.0")
    finally:
        connection.close()
    published = sum(outcomes)
    refused = sent - published
    return {"status": 200 if not refused else 503, "address": address, "published": published, "refused": refused}


def _broker_unavailable(why: str, protocol: str = "MQTT") -> dict[str, Any]:
    return errors.connection_failed(f"Cannot publish to the {protocol} broker: {why}.").to_json()
