"""The MQTT transport (3.1.1 and 5, paho-mqtt 2.x): QoS 1 from an MQTT broker through the ledger.

What a connector does beyond its protocol is :mod:`ackstore.connectors.core`; this module is how
MQTT receives, settles and replies, with Ditto's semantics (B.9's MQTT row, decisions #99):

* **Manual acknowledgement.** Sources are subscribed with their ``qos``; a QoS-1 message's
  PUBACK is sent only when its settlement decision is carried out. Ack, reject and dead-letter
  are all a PUBACK (MQTT has no nack; what was decided is in the ledger). A redeliver decision
  withholds the PUBACK and — with ``reconnectForRedelivery`` — the session ends after
  ``reconnectForRedeliveryDelay`` and a new one starts, so that the broker sends it again;
  without it, the message is PUBACKed as Ditto does, and its settlement row says so
  (``carried_out_as``).
* **A persistent session.** A fixed client id with clean session (3.1.1) / clean start (5)
  false and a session expiry (5): what is published while the connector is away waits in the
  broker. The broker resends unacknowledged messages when the session resumes; they are
  recognised by their key (:func:`ackstore.rules.mqtt.message_key`) and never stored twice.
* **Nothing lost around a (re)connect** (Ditto PR #2562): the session hands every message to the
  connector from the first packet after CONNACK, before the subscriptions are acknowledged.
* **The in-flight bound.** With PUBACK withheld until a decision taken a time T later, one
  session holds at most *receive maximum* (MQTT 5) or the broker's ``max_inflight_messages``
  (3.1.1) messages, so it takes at most that many per T; the rest wait in the broker's queue,
  which must not be limited (``docker/mosquitto.conf``). Several connectors sharing a
  subscription (``$share/<group>/<filter>``) scale past it. Mosquitto counts the messages its
  limits dropped in ``$SYS/broker/publish/messages/dropped``; the session watches it and says
  so whenever it grows.
* **Headers.** MQTT 5 user properties, content type, correlation data and response topic become
  Ditto headers (and back on targets and answers); MQTT 3.1.1 carries only the envelope.

Targets publish at QoS 1 (or their ``qos``) on a client of their own (the publisher id), and the
PUBACK issues the target's acknowledgement label: 200, or 503 when the broker refuses it.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from typing import Any, Callable, Mapping

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ackstore import faults
from ackstore.connectors.config import MQTT5, ConnectionConfig, MqttSettings, Source, Target
from ackstore.connectors.core import Connector, Message, Options, Session, Transport
from ackstore.connectors.outage import Outage
from ackstore.connectors.targets import UNCONFIRMED_MAX, Published, TargetFeed
from ackstore.ledger.store import AckStore
from ackstore.rules import jsontext, mqtt, wire
from ackstore.rules.connectivity import Disposition

log = logging.getLogger("ackstore.connector")

DROPPED = "$SYS/broker/publish/messages/dropped"  # Mosquitto's count of messages its limits dropped
SHARED = "$share/"
READS_PER_PROCESS = 5000  # packets read at most per call, so batches are handed over in between
CONNECT_TIMEOUT_S = 30.0


class MqttLost(Exception):
    """The session with the broker ended or could not start."""


class MqttConnector(Connector):
    """A connector whose broker speaks MQTT 3.1.1 or 5."""

    def __init__(self, store: AckStore, config: ConnectionConfig, options: Options | None = None) -> None:
        options = options or Options()
        super().__init__(store, config, MqttTransport(config, options), options)


class MqttTransport(Transport):
    lost = (MqttLost, OSError)

    def __init__(self, config: ConnectionConfig, options: Options) -> None:
        if config.mqtt is None:
            raise ValueError("not an MQTT connection")
        self.config = config
        self.settings: MqttSettings = config.mqtt
        self.options = options

    def connect(self, deliver: Callable[[Message], None]) -> Session:
        return MqttSession(self.config, deliver)

    def disposition(self, decision: str) -> Disposition:
        return mqtt.disposition(decision, self.settings.reconnect_for_redelivery)

    def carried_out_as(self, decision: str) -> str | None:
        return mqtt.carried_out_as(decision, self.settings.reconnect_for_redelivery)

    def consuming(self) -> str:
        topics = ", ".join(f"{t} (QoS {s.qos})" for s in self.config.sources for t in s.topics) or "nothing"
        return f"{topics} as client {self.settings.client_id} on {self.config.connection_type}"

    def warnings(self, store: AckStore, options: Options) -> list[str]:
        found = []
        if self.settings.clean_session:
            found.append("cleanSession is true: the broker forgets the session at every disconnect, and with it "
                         "every message held for a decision and every one published meanwhile (QoS 1 needs false)")
        if any(s.qos == 0 for s in self.config.sources):
            found.append("a source subscribes with QoS 0: its messages are never acknowledged, and a crash loses "
                         "what was not stored")
        return found

    def targets(self, store: AckStore, outage: Outage, stop: threading.Event,
                published: Callable[[int], None]) -> Callable[[], None] | None:
        if not self.config.targets:
            return None
        feed = TargetFeed(store, self.config, lease=self.options.target_lease, outage=outage, published=published)
        return MqttTargets(feed, interval_s=self.options.target_interval_s, reconnect_s=self.options.reconnect_s,
                           stop=stop).run


def _client(config: ConnectionConfig, client_id: str, *, persistent: bool, manual_ack: bool) -> paho.Client:
    """A paho client for ``config``'s broker (not connected yet)."""
    version = paho.MQTTv5 if config.connection_type == MQTT5 else paho.MQTTv311
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version,
                         clean_session=None if version == paho.MQTTv5 else not persistent,
                         reconnect_on_failure=False, manual_ack=manual_ack)
    address = mqtt.broker_address(config.uri)
    if address.username is not None:
        client.username_pw_set(address.username, address.password)
    if address.tls:
        client.tls_set()
    client.max_inflight_messages_set(1000)  # our own QoS-1 publishes awaiting their PUBACK
    client.max_queued_messages_set(0)
    return client


def _open(client: paho.Client, config: ConnectionConfig, settings: MqttSettings, *, persistent: bool,
          receive_maximum: int | None = None) -> None:
    """CONNECT and wait for the CONNACK; :class:`MqttLost` if the broker refuses."""
    address = mqtt.broker_address(config.uri)
    answered: list[Any] = []
    client.on_connect = lambda _c, _u, _flags, reason, _props: answered.append(reason)
    properties = None
    kwargs: dict[str, Any] = {}
    if client.protocol == paho.MQTTv5:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = settings.session_expiry_s if persistent else 0
        if receive_maximum is not None:
            properties.ReceiveMaximum = receive_maximum
        kwargs = {"clean_start": not persistent, "properties": properties}
    try:
        client.connect(address.host, address.port, keepalive=settings.keep_alive_s, **kwargs)
    except OSError as problem:
        raise MqttLost(f"cannot connect to {address.host}:{address.port}: {problem}") from None
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while not answered:
        rc = client.loop(timeout=0.1)
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or time.monotonic() > deadline:
            client.disconnect()
            raise MqttLost(f"no CONNACK from {address.host}:{address.port} ({paho.error_string(rc)})")
    if answered[0].is_failure:
        client.disconnect()
        raise MqttLost(f"the broker refused the connection: {answered[0]}")


class MqttSession(Session):
    """One connection of the persistent session: its messages, their packet ids until PUBACKed."""

    def __init__(self, config: ConnectionConfig, deliver: Callable[[Message], None]) -> None:
        assert config.mqtt is not None
        self.config = config
        self.settings = config.mqtt
        self._deliver = deliver
        self._next_tag = 0
        self._unacked: dict[int, int] = {}  # tag -> packet id, QoS-1 messages not PUBACKed yet
        self._withheld = 0  # messages whose PUBACK is withheld until the next session
        self._reconnect_at: float | None = None
        self._consuming = True
        self._lost: str | None = None
        self._dropped: int | None = None
        self._filters = [(_matched_filter(topic), source) for source in config.sources for topic in source.topics]
        self.client = _client(config, self.settings.client_id, persistent=not self.settings.clean_session,
                              manual_ack=True)
        self.client.on_message = self._on_message
        self.client.on_disconnect = self._on_disconnect
        # Messages of a resumed session may arrive right after CONNACK, before SUBACK: on_message
        # is in place before CONNECT, and every message is handed over (Ditto PR #2562).
        _open(self.client, config, self.settings, persistent=not self.settings.clean_session,
              receive_maximum=self.settings.receive_maximum)
        self._subscribe()

    def _subscribe(self) -> None:
        wanted = [(topic, source.qos or 0) for source in self.config.sources for topic in source.topics]
        if not wanted:
            return
        granted: list[Any] = []
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _props: granted.append(codes)
        rc, _ = self.client.subscribe(wanted)
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while not granted:
            self._check(self.client.loop(timeout=0.1))
            if time.monotonic() > deadline:
                raise MqttLost("no SUBACK from the broker")
        refused = [topic for (topic, _), code in zip(wanted, granted[0]) if code.is_failure]
        if refused:
            raise MqttLost(f"the broker refused the subscription to {', '.join(refused)}")
        for (topic, qos), code in zip(wanted, granted[0]):
            if code.value < qos:
                log.warning("connector %s: the broker granted QoS %d for %s (asked %d): its messages are not "
                            "acknowledged", self.config.id, code.value, topic, qos)
        self.client.subscribe(DROPPED, 0)  # best effort: a broker without it (or an ACL) says nothing

    def _on_disconnect(self, _client: Any, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
        self._lost = f"disconnected ({reason})"

    def _on_message(self, _client: Any, _userdata: Any, message: paho.MQTTMessage) -> None:
        if message.topic == DROPPED:
            self._watch_drops(message.payload)
            return
        if not self._consuming:  # not PUBACKed: the broker sends it again next session
            return
        source = self._source_of(message.topic)
        if source is None:  # a subscription of an earlier configuration, kept by the session
            log.warning("connector %s: a message on %s matches no source; the broker sends it again next session",
                        self.config.id, message.topic)
            return
        self._next_tag += 1
        if message.qos > 0:
            self._unacked[self._next_tag] = message.mid
        props = getattr(message, "properties", None)
        headers, fields = mqtt.inbound(getattr(props, "UserProperty", None), getattr(props, "ContentType", None),
                                       getattr(props, "CorrelationData", None), getattr(props, "ResponseTopic", None))
        key = mqtt.message_key(message.topic, fields["message_id"], fields["correlation_id"], message.payload)
        self._deliver(Message(self._next_tag, bool(message.dup), message.payload, key, headers, fields, source,
                              message.topic))

    def _source_of(self, topic: str) -> Source | None:
        for topic_filter, source in self._filters:
            if paho.topic_matches_sub(topic_filter, topic):
                return source
        return None

    def _watch_drops(self, payload: bytes) -> None:
        try:
            dropped = int(payload)
        except ValueError:
            return
        if self._dropped is not None and dropped > self._dropped:
            log.error("connector %s: the broker dropped %d messages since the last count (%d in all): its "
                      "in-flight or queue limit was reached, and they are lost to every subscriber — raise "
                      "max_queued_messages (docs/decisions.md #100)", self.config.id, dropped - self._dropped, dropped)
        self._dropped = dropped

    def _check(self, rc: MQTTErrorCode) -> None:
        if self._lost is not None:
            raise MqttLost(self._lost)
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise MqttLost(paho.error_string(rc))

    def process(self, time_limit: float) -> None:
        self._check(self.client.loop(timeout=time_limit))
        sock = self.client.socket()
        for _ in range(READS_PER_PROCESS):  # what already arrived, without waiting again
            if sock is None or not (_pending(sock) or select.select([sock], [], [], 0)[0]):
                break
            self._check(self.client.loop_read())
        if self.client.want_write():
            self._check(self.client.loop_write())

    def settle(self, dispositions: Mapping[int, Disposition]) -> None:
        for tag in sorted(dispositions):  # PUBACKs in the order the messages came
            mid = self._unacked.pop(tag, None)
            if mid is None:  # QoS 0, or settled already
                continue
            if dispositions[tag].requeue:
                self._withhold()
                continue
            faults.checkpoint("connector:settling")
            self._check(self.client.ack(mid, 1))

    def _withhold(self) -> None:
        self._withheld += 1
        if self._reconnect_at is None:
            self._reconnect_at = time.monotonic() + self.settings.reconnect_for_redelivery_delay_s

    def wants_reconnect(self) -> bool:
        return self._reconnect_at is not None and time.monotonic() >= self._reconnect_at

    def give_back(self) -> bool:
        """Nothing to send: the persistent session keeps every message not PUBACKed."""
        return bool(self._unacked)

    def stop_consuming(self) -> None:
        """Not an UNSUBSCRIBE, which would end the subscription in the persistent session: what
        arrives from now on is neither stored nor PUBACKed, and comes again next session."""
        self._consuming = False

    def reply(self, reply_to: str, message: dict[str, Any]) -> None:
        info = self.client.publish(reply_to, jsontext.dumps(message).encode(), qos=1,
                                   properties=_properties(self.client, message["headers"], wire.DITTO_CONTENT_TYPE))
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            log.warning("connector %s: the reply to %s was not sent (%s)", self.config.id, reply_to,
                        paho.error_string(info.rc))

    def close(self) -> None:
        if self.client.is_connected():
            self.client.disconnect()
            for _ in range(20):  # let DISCONNECT leave
                if self.client.loop(timeout=0.05) != MQTTErrorCode.MQTT_ERR_SUCCESS:
                    break
        self.client.socket() and self.client.socket().close()  # type: ignore[union-attr]


class MqttTargets:
    """Publish to the targets of ``config`` until ``stop`` is set, on a client of its own."""

    def __init__(self, feed: TargetFeed, *, interval_s: float, reconnect_s: float, stop: threading.Event) -> None:
        assert feed.config.mqtt is not None
        self.feed = feed
        self.config = feed.config
        self.settings: MqttSettings = feed.config.mqtt
        self.interval_s = interval_s
        self.reconnect_s = reconnect_s
        self.stop = stop
        self._unconfirmed: dict[int, Published] = {}  # packet id -> what it carried

    def run(self) -> None:
        while not self.stop.is_set():
            client = _client(self.config, self.settings.publisher_client_id, persistent=False, manual_ack=False)
            client.on_publish = self._answered
            self._unconfirmed.clear()
            try:
                _open(client, self.config, self.settings, persistent=False)
                self._publish_until_stopped(client)
            except (MqttLost, OSError) as problem:
                if not self.stop.is_set():
                    log.warning("connector %s: targets' connection lost (%s); %d publishes unanswered are pulled "
                                "again when their lease ends", self.config.id, problem, len(self._unconfirmed))
            finally:
                if client.is_connected():
                    client.disconnect()
                    client.loop(timeout=0.05)
            self.stop.wait(self.reconnect_s)

    def _publish_until_stopped(self, client: paho.Client) -> None:
        next_tick = 0.0
        while not self.stop.is_set():
            rc = client.loop(timeout=0.05)
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                raise MqttLost(paho.error_string(rc))
            now = time.monotonic()
            if now < next_tick or len(self._unconfirmed) >= UNCONFIRMED_MAX:
                continue
            pulled, retry = self.feed.pull()
            for target, item in pulled:
                self._publish(client, target, item)
            next_tick = now + max(self.interval_s, retry)

    def _publish(self, client: paho.Client, target: Target, item: Published) -> None:
        info = client.publish(target.topic, jsontext.dumps(item.message).encode(), qos=target.qos or 0,
                              properties=_properties(client, item.message["headers"], wire.DITTO_CONTENT_TYPE))
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise MqttLost(paho.error_string(info.rc))
        if target.qos:
            self._unconfirmed[info.mid] = item
        else:  # QoS 0: nothing to wait for (Ditto: 200)
            self.feed.answered([item], confirmed=True)

    def _answered(self, _client: Any, _userdata: Any, mid: int, reason: Any, _properties: Any) -> None:
        """A PUBACK: 200, or 503 when its reason code is a failure (MQTT 5)."""
        item = self._unconfirmed.pop(mid, None)
        if item is not None:
            self.feed.answered([item], confirmed=not reason.is_failure)


def _properties(client: paho.Client, headers: Mapping[str, Any], content_type: str) -> Properties | None:
    """MQTT 5 properties of a published Ditto message; MQTT 3.1.1 has none."""
    if client.protocol != paho.MQTTv5:
        return None
    mapped = mqtt.outbound(headers)
    properties = Properties(PacketTypes.PUBLISH)
    properties.ContentType = mapped["content_type"] or content_type
    if mapped["correlation_data"] is not None:
        properties.CorrelationData = mapped["correlation_data"]
    if mapped["response_topic"] is not None:
        properties.ResponseTopic = mapped["response_topic"]
    if mapped["user_properties"]:
        properties.UserProperty = mapped["user_properties"]
    return properties


def _matched_filter(topic: str) -> str:
    """The filter a subscription's messages match: a shared one's without ``$share/<group>/``."""
    if topic.startswith(SHARED):
        return topic[len(SHARED):].partition("/")[2]
    return topic


def _pending(sock: Any) -> int:
    """Bytes a TLS socket already decrypted (select does not see them)."""
    return sock.pending() if hasattr(sock, "pending") else 0
