"""``ackstore publish amqp|mqtt``: send Ditto Protocol messages to a queue (with publisher
confirms) or an MQTT topic (QoS 1, each PUBACKed).

One JSON message per line. On AMQP each gets a fresh ``message_id`` unless its headers carry a
``message-id``; its ``correlation-id`` and ``reply-to`` headers become the AMQP properties of
the same name. On MQTT 5 its ``correlation-id`` becomes correlation data, its ``reply-to`` the
response topic and its ``message-id`` a user property; MQTT 3.1.1 sends the line alone. A line
that is not JSON is sent as it is (useful to test rejections).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterable

import threading

import paho.mqtt.client as paho
import pika
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pika.exceptions import NackError, UnroutableError

from ackstore.rules import errors, mqtt, wire

PUBACK_WAIT_S = 60.0


def _headers(line: bytes) -> dict[str, Any]:
    """The line's Ditto headers (names in lower case), if it is an envelope."""
    try:
        envelope = errors.parse_json_text(line)
    except errors.DittoError:
        return {}
    if isinstance(envelope, dict) and isinstance(envelope.get("headers"), dict):
        return {str(k).lower(): v for k, v in envelope["headers"].items()}
    return {}


def _properties(line: bytes) -> pika.BasicProperties:
    headers = _headers(line)

    def text(name: str) -> str | None:
        value = headers.get(name)
        return value if isinstance(value, str) and value else None

    return pika.BasicProperties(
        message_id=text("message-id") or uuid.uuid4().hex,
        correlation_id=text("correlation-id"),
        reply_to=text("reply-to"),
        content_type=wire.DITTO_CONTENT_TYPE,
        delivery_mode=2,  # persistent
    )


def publish_lines(url: str, queue: str, lines: Iterable[bytes]) -> dict[str, Any]:
    """Publish every non-empty line to ``queue``; the answer counts what the broker confirmed."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    published = refused = 0
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for line in lines:
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                channel.basic_publish("", queue, line, _properties(line), mandatory=True)
                published += 1
            except (NackError, UnroutableError):
                refused += 1
    finally:
        connection.close()
    status = 200 if not refused else 503
    return {"status": status, "queue": queue, "published": published, "refused": refused}


def publish_mqtt_lines(url: str, topic: str, lines: Iterable[bytes], connection_type: str) -> dict[str, Any]:
    """Publish every non-empty line to ``topic`` at QoS 1; the answer counts the PUBACKs."""
    address = mqtt.broker_address(url)
    version = paho.MQTTv5 if connection_type == "mqtt-5" else paho.MQTTv311
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"ackstore-publish-{uuid.uuid4().hex[:12]}",
                         protocol=version, reconnect_on_failure=False)
    if address.username is not None:
        client.username_pw_set(address.username, address.password)
    if address.tls:
        client.tls_set()
    client.max_inflight_messages_set(1000)
    answered: dict[int, bool] = {}
    client.on_publish = lambda _c, _u, mid, reason, _p: answered.__setitem__(mid, not reason.is_failure)
    connected = threading.Event()
    refusal: list[Any] = []
    client.on_connect = lambda _c, _u, _f, reason, _p: (refusal.append(reason) if reason.is_failure else None,
                                                       connected.set())
    try:
        client.connect(address.host, address.port)
    except OSError as problem:
        return _broker_unavailable(str(problem))
    client.loop_start()
    sent: list[int] = []
    try:
        if not connected.wait(PUBACK_WAIT_S) or refusal:
            return _broker_unavailable(f"the broker refused the connection ({refusal[0]})" if refusal else "no CONNACK")
        for line in lines:
            line = line.rstrip(b"\r\n")
            if line.strip():
                sent.append(client.publish(topic, line, qos=1, properties=_mqtt_properties(version, line)).mid)
        deadline = time.monotonic() + PUBACK_WAIT_S
        while len(answered) < len(sent) and time.monotonic() < deadline and client.is_connected():
            time.sleep(0.01)
    finally:
        client.disconnect()
        client.loop_stop()
    published = sum(1 for mid in sent if answered.get(mid))
    refused = len(sent) - published
    return {"status": 200 if not refused else 503, "topic": topic, "published": published, "refused": refused}


def _mqtt_properties(version: int, line: bytes) -> Properties | None:
    if version != paho.MQTTv5:
        return None
    headers = _headers(line)
    mapped = mqtt.outbound(headers)
    properties = Properties(PacketTypes.PUBLISH)
    properties.ContentType = wire.DITTO_CONTENT_TYPE
    if mapped["correlation_data"] is not None:
        properties.CorrelationData = mapped["correlation_data"]
    if mapped["response_topic"] is not None:
        properties.ResponseTopic = mapped["response_topic"]
    message_id = headers.get("message-id")
    if isinstance(message_id, str) and message_id:
        properties.UserProperty = [("message-id", message_id)]
    return properties


def _broker_unavailable(why: str) -> dict[str, Any]:
    return errors.DittoError(503, "connectivity:connection.failed", f"Cannot publish to the MQTT broker: {why}.",
                             "Check that the broker runs at the URL given and accepts this client.").to_json()
