"""Helpers for tests against a Mosquitto of the test's own (tests/support/own_mosquitto.py): the MQTT
connector as a real subprocess (``ackstore connect mqtt``), a publisher that waits for its
PUBACKs, a collector of what a topic receives, and a look into a persistent session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from typing import IO, Any, Iterable, Mapping, Union
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.broker import ROOT


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 1883


def mqtt_connector(database_url: str, url: str, *args: str, env: dict[str, str] | None = None,
                   log: IO[str] | None = None) -> subprocess.Popen:
    """``ackstore connect mqtt --url URL ARGS`` as a subprocess (log to a pipe, or to ``log``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ackstore.cli", "--database-url", database_url, "connect", "mqtt", "--url", url, *args],
        cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE if log is None else subprocess.DEVNULL,
        stderr=subprocess.PIPE if log is None else log, text=True,
    )


def _client(client_id: str, version: int, **kwargs: Any) -> paho.Client:
    clean_session = kwargs.pop("clean_session", True)  # MQTT 5 says clean start when connecting
    clean = {} if version == paho.MQTTv5 else {"clean_session": clean_session}
    return paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version, **clean, **kwargs)


def _connected(client: paho.Client, url: str, **connect: Any) -> paho.Client:
    done = threading.Event()
    client.on_connect = lambda *_: done.set()
    parts = urlsplit(url)
    if parts.username is not None:  # a broker of the test's own that takes one user (own_mosquitto's credentials)
        client.username_pw_set(unquote(parts.username), unquote(parts.password or ""))
    client.connect(*_address(url), **connect)
    client.loop_start()
    if not done.wait(10):
        raise AssertionError(f"no CONNACK from {url}")
    return client


Envelope = Union[dict[str, Any], bytes]
# An envelope, or an envelope with MQTT 5 properties of its own (paho's names: they win).
Sent = Union[Envelope, tuple[Envelope, Mapping[str, Any]]]


def publish(url: str, topic: str, envelopes: Iterable[Sent], version: int = paho.MQTTv5,
            response_topic: str | None = None) -> int:
    """Publish each envelope at QoS 1 and wait until the broker PUBACKed all; MQTT 5 messages
    carry their correlation-id as correlation data (and ``response_topic`` when given), and the
    properties given with them."""
    client = _client(f"test-publisher-{uuid.uuid4().hex[:8]}", version)
    client.max_inflight_messages_set(1000)
    _connected(client, url)
    infos = []
    try:
        for sent in envelopes:
            envelope, own = sent if isinstance(sent, tuple) else (sent, {})
            body = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
            properties = None
            if version == paho.MQTTv5:
                properties = Properties(PacketTypes.PUBLISH)
                headers = envelope.get("headers", {}) if isinstance(envelope, dict) else {}
                if headers.get("correlation-id") and "CorrelationData" not in own:
                    properties.CorrelationData = headers["correlation-id"].encode()
                if response_topic:
                    properties.ResponseTopic = response_topic
                for name, value in own.items():
                    setattr(properties, name, value)
            infos.append(client.publish(topic, body, qos=1, properties=properties))
            if len(infos) % 1000 == 0:  # packet ids are 16 bits: a window of them in flight
                _all_published(infos[-1000:])
        _all_published(infos)
    finally:
        client.disconnect()
        client.loop_stop()
    return len(infos)


def _all_published(infos: list[Any]) -> None:
    for info in infos:
        info.wait_for_publish(30)
        assert info.is_published(), "the broker PUBACKed every publish"


class Collector:
    """Every message a topic filter receives (QoS 1, a clean session of its own)."""

    def __init__(self, url: str, topic: str, version: int = paho.MQTTv5) -> None:
        self.messages: list[paho.MQTTMessage] = []
        self._lock = threading.Lock()
        subscribed = threading.Event()
        self.client = _client(f"test-collector-{uuid.uuid4().hex[:8]}", version)
        self.client.on_message = lambda _c, _u, message: self._add(message)
        self.client.on_subscribe = lambda *_: subscribed.set()
        _connected(self.client, url)
        self.client.subscribe(topic, 1)
        if not subscribed.wait(10):
            raise AssertionError("no SUBACK")

    def _add(self, message: paho.MQTTMessage) -> None:
        with self._lock:
            self.messages.append(message)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def session_backlog(url: str, client_id: str, marker_topic: str, version: int = paho.MQTTv5) -> list[bytes]:
    """What the broker sends a persistent session when it resumes (the messages it holds for it,
    unacknowledged or queued), without acknowledging any: they stay in the session. A marker
    published to ``marker_topic`` (which the session subscribes to) after it resumed comes after
    all of them: it alone is acknowledged, and it ends the wait."""
    marker = f"ackstore-test-marker-{uuid.uuid4().hex}".encode()
    received: list[bytes] = []
    seen = threading.Event()
    client = _client(client_id, version, clean_session=False, manual_ack=True)

    def on_message(_c: Any, _u: Any, message: paho.MQTTMessage) -> None:
        if message.payload == marker:
            client.ack(message.mid, message.qos)
            seen.set()
        elif not message.topic.startswith("$SYS/"):
            received.append(message.payload)

    client.on_message = on_message
    connect: dict[str, Any] = {}
    if version == paho.MQTTv5:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 3600
        connect = {"clean_start": False, "properties": properties}
    _connected(client, url, **connect)
    publish(url, marker_topic, [marker], version)
    try:
        if not seen.wait(30):
            raise AssertionError(f"the marker on {marker_topic} never reached the session {client_id}")
    finally:
        client.disconnect()
        client.loop_stop()
    return received
