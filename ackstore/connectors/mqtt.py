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
  limits dropped in ``$SYS/broker/publish/messages/dropped``; the session watches it, says
  so whenever it grows, and the metrics show it.
* **Headers.** MQTT 5 user properties, content type, correlation data and response topic become
  Ditto headers (and back on targets and answers); MQTT 3.1.1 carries only the envelope.

Targets publish at QoS 1 (or their ``qos``) on a client of their own (the publisher id), and the
PUBACK issues the target's acknowledgement label: 200, or 503 when the broker refuses it.

An answer or a target's message MQTT cannot carry (:func:`ackstore.rules.mqtt.publish_problem`: a
reply-to that is no topic name, a property past its limit, a packet past the broker's Maximum
Packet Size) is dropped and said, before paho sees it: paho counts a QoS-1 message in flight
before it packs its properties, and Mosquitto closes the connection of a client that sends what
it must not.
"""

from __future__ import annotations

import logging
import select
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from ackstore import faults
from ackstore.connectors.config import MQTT5, ConnectionConfig, MqttSettings, Source, Target
from ackstore.connectors.core import Connector
from ackstore.connectors.logs import shown
from ackstore.connectors.metrics import ConnectorMetrics
from ackstore.connectors.outage import Outage
from ackstore.connectors.options import Options
from ackstore.connectors.targets import UNCONFIRMED_MAX, Published, TargetFeed, TargetPublisher, targets_work
from ackstore.connectors.transport import Message, Session, Transport, Unencodable, json_payload
from ackstore.ledger.store import AckStore
from ackstore.rules import mqtt
from ackstore.rules.connectivity import Settling

log = logging.getLogger("ackstore.connector")

DROPPED = "$SYS/broker/publish/messages/dropped"  # Mosquitto's count of messages its limits dropped
SHARED = "$share/"
READS_PER_PROCESS = 5000  # packets read at most per call, so batches are handed over in between
CONNECT_TIMEOUT_S = 30.0
PUBLISH_WINDOW = 1000  # our QoS-1 publishes awaiting their PUBACK at once (packet ids are 16 bits)
UNENCODABLE = (Unencodable, ValueError, struct.error)  # paho's failures to encode a message (the backstop)


class MqttLost(Exception):
    """The session with the broker ended or could not start."""


class MqttConnector(Connector):
    """A connector whose broker speaks MQTT 3.1.1 or 5."""

    def __init__(self, store: AckStore, config: ConnectionConfig, options: Options | None = None,
                 metrics: ConnectorMetrics | None = None) -> None:
        options = options or Options()
        metrics = metrics or ConnectorMetrics(config.id, config.connection_type)
        super().__init__(store, config, MqttTransport(config, options, metrics), options, metrics)


class MqttTransport(Transport):
    lost = (MqttLost, OSError)
    unencodable = UNENCODABLE

    def __init__(self, config: ConnectionConfig, options: Options, metrics: ConnectorMetrics | None = None) -> None:
        if config.mqtt is None:
            raise ValueError("not an MQTT connection")
        self.config = config
        self.settings: MqttSettings = config.mqtt
        self.options = options
        # across sessions: drops while reconnecting are said too
        self.drops = DropWatch(config.id, metrics.broker_dropped if metrics is not None else None)
        self._connected_before = False

    def connect(self, deliver: Callable[[Message], None]) -> Session:
        session = MqttSession(self.config, deliver, self.drops)
        if self._connected_before and not session.resumed and not self.settings.clean_session:
            log.error("connector %s: the broker no longer had this connector's session (expired, or the broker "
                      "lost it): what it held or queued for the connector and was not stored is gone; the "
                      "ledger's unsettled report lists the signals whose messages will not come again",
                      self.config.id)
        self._connected_before = True
        return session

    def disposition(self, decision: str) -> Settling:
        return mqtt.disposition(decision, self.settings.reconnect_for_redelivery)

    def carried_out_as(self, decision: str) -> str | None:
        return mqtt.carried_out_as(decision, self.settings.reconnect_for_redelivery)

    def consuming(self) -> str:
        topics = ", ".join(f"{t} (QoS {s.qos})" for s in self.config.sources for t in s.addresses) or "nothing"
        return f"{topics} as client {self.settings.client_id} on {self.config.connection_type}"

    def warnings(self, store: AckStore, options: Options) -> list[str]:
        found = []
        if self.settings.clean_session:
            found.append("cleanSession is true: the broker forgets the session at every disconnect, and with it "
                         "every message held for a decision and every one published meanwhile (QoS 1 needs false)")
        if any(s.qos == 0 for s in self.config.sources):
            found.append("a source subscribes with QoS 0: its messages are never acknowledged, and a crash loses "
                         "what was not stored")
        if self.config.targets and not self.settings.separate_publisher_client:
            found.append("separatePublisherClient is false: targets publish on a client of their own all the same "
                         f"({self.settings.publisher_client_id}), so that a reconnect never drops an outbound "
                         "message (decisions #99)")
        return found

    def targets(self, store: AckStore, outage: Outage, stop: threading.Event, answered: Callable[[int, bool], None],
                dropped: Callable[[str, BaseException], None]) -> Callable[[], None] | None:
        return targets_work(store, self.config, self.options, outage, answered, dropped,
                            MqttTargets.maker(self.options, stop))


def client_for(uri: str, client_id: str, *, version5: bool, persistent: bool, manual_ack: bool) -> paho.Client:
    """A paho client for the broker of ``uri`` (not connected yet)."""
    version = paho.MQTTv5 if version5 else paho.MQTTv311
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version,
                         clean_session=None if version5 else not persistent,
                         reconnect_on_failure=False, manual_ack=manual_ack)
    address = mqtt.broker_address(uri)
    if address.username is not None:
        client.username_pw_set(address.username, address.password)
    if address.tls:
        client.tls_set()
    client.max_inflight_messages_set(PUBLISH_WINDOW)  # our own QoS-1 publishes awaiting their PUBACK
    client.max_queued_messages_set(0)
    return client


def _client(config: ConnectionConfig, client_id: str, *, persistent: bool, manual_ack: bool) -> paho.Client:
    return client_for(config.uri, client_id, version5=config.connection_type == MQTT5, persistent=persistent,
                      manual_ack=manual_ack)


@dataclass(frozen=True)
class Connack:
    """What the broker's CONNACK says."""

    resumed: bool  # it kept a session for us
    maximum_packet_size: int | None  # MQTT 5: the largest packet it takes (it disconnects a larger one)


def open_connection(client: paho.Client, uri: str, *, keep_alive_s: int, persistent: bool,
                    session_expiry_s: int = 0, receive_maximum: int | None = None) -> Connack:
    """CONNECT to the broker of ``uri`` and wait for the CONNACK: whether the broker resumed a
    session it kept for us, the largest packet it takes. :class:`MqttLost` if it cannot be
    reached or refuses."""
    address = mqtt.broker_address(uri)
    answered: list[Any] = []
    connack: list[Connack] = []
    client.on_connect = lambda _c, _u, flags, reason, props: (
        answered.append(reason),
        connack.append(Connack(bool(flags.session_present), getattr(props, "MaximumPacketSize", None))))
    properties = None
    kwargs: dict[str, Any] = {}
    if client.protocol == paho.MQTTv5:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = session_expiry_s if persistent else 0
        if receive_maximum is not None:
            properties.ReceiveMaximum = receive_maximum
        kwargs = {"clean_start": not persistent, "properties": properties}
    try:
        client.connect(address.host, address.port, keepalive=keep_alive_s, **kwargs)
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
    return connack[0]


class MqttSession(Session):
    """One connection of the persistent session: its messages, their packet ids until PUBACKed."""

    def __init__(self, config: ConnectionConfig, deliver: Callable[[Message], None], drops: DropWatch) -> None:
        assert config.mqtt is not None
        self.config = config
        self.settings = config.mqtt
        self._deliver = deliver
        self._drops = drops
        self._next_tag = 0
        self._unacked: dict[int, int] = {}  # tag -> packet id, QoS-1 messages not PUBACKed yet
        self._reconnect_at: float | None = None
        self._consuming = True
        self._lost: str | None = None
        self._strays: set[str] = set()  # topics of messages no source takes, said once a session
        self._filters = [(_matched_filter(topic), source) for source in config.sources for topic in source.addresses]
        self.client = _client(config, self.settings.client_id, persistent=not self.settings.clean_session,
                              manual_ack=True)
        self.client.on_message = self._on_message
        self.client.on_disconnect = self._on_disconnect
        # Messages of a resumed session may arrive right after CONNACK, before SUBACK: on_message
        # is in place before CONNECT, and every message is handed over (Ditto PR #2562).
        self.connack = open_connection(self.client, config.uri, keep_alive_s=self.settings.keep_alive_s,
                                       persistent=not self.settings.clean_session,
                                       session_expiry_s=self.settings.session_expiry_s,
                                       receive_maximum=self.settings.receive_maximum)
        self.resumed = self.connack.resumed
        try:
            self._subscribe()
        except BaseException:
            self.close()
            raise

    def _subscribe(self) -> None:
        wanted = [(topic, source.qos or 0) for source in self.config.sources for topic in source.addresses]
        if not wanted:
            return
        granted: list[Any] = []
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _props: granted.append(codes)
        if self.client.protocol == paho.MQTTv5:  # a resumed subscription does not send retained messages again
            options = [(topic, SubscribeOptions(qos=qos, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB))
                       for topic, qos in wanted]
            self.client.subscribe(options)
        else:
            self.client.subscribe(wanted)
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
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _props: self._drops.subscribed(codes[0])
        self.client.subscribe(DROPPED, 0)

    def _on_disconnect(self, _client: Any, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
        self._lost = f"disconnected ({reason})"

    def _on_message(self, _client: Any, _userdata: Any, message: paho.MQTTMessage) -> None:
        if message.topic == DROPPED:
            self._drops.counted(message.payload)
            return
        if not self._consuming:  # not PUBACKed: the broker sends it again next session
            return
        source = self._source_of(message.topic)
        if source is None:  # a subscription an earlier configuration left in the session
            if message.topic not in self._strays:
                self._strays.add(message.topic)
                log.warning("connector %s: a message on %r matches no source (a subscription of an earlier "
                            "configuration, kept by the session): acknowledged, not stored", self.config.id,
                            message.topic)
            if message.qos > 0:
                self._check(self.client.ack(message.mid, message.qos))
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

    def _check(self, rc: MQTTErrorCode) -> None:
        if self._lost is not None:
            raise MqttLost(self._lost)
        _ok(rc)

    def process(self, time_limit: float) -> None:
        """One loop (at most one packet read) — with a time limit, then everything already
        received, up to a bound. Without one (the core's hand-over is full) only the keepalive
        and one packet: the broker holds the rest back."""
        self._check(self.client.loop(timeout=time_limit))
        if time_limit <= 0:
            return
        sock = self.client.socket()
        for _ in range(READS_PER_PROCESS):  # what already arrived, without waiting again
            if sock is None or not (_pending(sock) or select.select([sock], [], [], 0)[0]):
                break
            self._check(self.client.loop_read())
        if self.client.want_write():
            self._check(self.client.loop_write())

    def settle(self, dispositions: Mapping[int, Settling]) -> None:
        for tag in sorted(dispositions):  # PUBACKs in the order the messages came
            mid = self._unacked.pop(tag, None)
            if mid is None:  # QoS 0, or settled already
                continue
            if dispositions[tag].requeue:  # the broker sends it again when the session resumes
                self._reconnect_soon()
                continue
            faults.checkpoint("connector:settling")
            self._check(self.client.ack(mid, 1))

    def _reconnect_soon(self) -> None:
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

    def reply(self, reply_to: str, message: dict[str, Any]) -> bool:
        """Best effort, as in Ditto: an answer MQTT cannot carry (a reply-to that is no topic name,
        a sender's correlation id past its limit) is :class:`Unencodable`, never published."""
        payload = json_payload(message)
        properties = publishable(self.client, reply_to, payload, message["headers"], qos=1,
                                 maximum_packet_size=self.connack.maximum_packet_size)
        info = self.client.publish(reply_to, payload, qos=1, properties=properties)
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            log.warning("connector %s: the reply to %s was not sent (%s)", self.config.id, shown(reply_to),
                        paho.error_string(info.rc))
            return False
        return True

    def close(self) -> None:
        _disconnect(self.client)


class MqttTargets(TargetPublisher):
    """Publish to the targets of ``config`` until ``stop`` is set, on a client of its own."""

    def __init__(self, feed: TargetFeed, *, interval_s: float, reconnect_s: float, stop: threading.Event) -> None:
        assert feed.config.mqtt is not None
        super().__init__(feed, interval_s=interval_s, reconnect_s=reconnect_s, stop=stop)
        self.settings: MqttSettings = feed.config.mqtt
        self._unconfirmed: dict[int, Published] = {}  # packet id -> what it carried
        self._maximum_packet_size: int | None = None  # the broker's, as its CONNACK says

    def run(self) -> None:
        while not self.stop.is_set():
            client = _client(self.config, self.settings.publisher_client_id, persistent=False, manual_ack=False)
            client.on_publish = self._answered
            self._unconfirmed.clear()
            try:
                connack = open_connection(client, self.config.uri, keep_alive_s=self.settings.keep_alive_s,
                                          persistent=False)
                self._maximum_packet_size = connack.maximum_packet_size
                self._publish_until_stopped(client)
            except (MqttLost, OSError) as problem:
                if not self.stop.is_set():
                    log.warning("connector %s: targets' connection lost (%s); %d publishes unanswered are pulled "
                                "again when their lease ends", self.config.id, problem, len(self._unconfirmed))
            finally:
                _disconnect(client)
            self.stop.wait(self.reconnect_s)

    def _publish_until_stopped(self, client: paho.Client) -> None:
        next_tick = 0.0
        while not self.stop.is_set():
            _ok(client.loop(timeout=0.05))
            now = time.monotonic()
            if now < next_tick or len(self._unconfirmed) >= UNCONFIRMED_MAX:
                continue
            pulled, retry = self.feed.pull()
            for target, item in pulled:
                self._publish(client, target, item)
            next_tick = now + max(self.interval_s, retry)

    def _publish(self, client: paho.Client, target: Target, item: Published) -> None:
        try:
            payload = json_payload(item.message)
            properties = publishable(client, target.topic, payload, item.message["headers"], qos=target.qos or 0,
                                     maximum_packet_size=self._maximum_packet_size)
            info = client.publish(target.topic, payload, qos=target.qos or 0, properties=properties)
        except UNENCODABLE as problem:
            self.feed.unsendable(target.topic, item, problem)
            return
        _ok(info.rc)
        if target.qos:
            self._unconfirmed[info.mid] = item
        else:  # QoS 0: nothing to wait for (Ditto: 200)
            self.feed.answered([item], confirmed=True)

    def _answered(self, _client: Any, _userdata: Any, mid: int, reason: Any, _properties: Any) -> None:
        """A PUBACK: 200, or 503 when its reason code is a failure (MQTT 5)."""
        item = self._unconfirmed.pop(mid, None)
        if item is not None:
            self.feed.answered([item], confirmed=not reason.is_failure)


def publishable(client: paho.Client, topic: str, payload: bytes, headers: Mapping[str, Any], *, qos: int,
                maximum_packet_size: int | None, message_id: str | None = None) -> Properties | None:
    """The MQTT 5 properties of a Ditto message published to ``topic`` (None on 3.1.1:
    the envelope carries its headers), once MQTT can carry the PUBLISH
    (:func:`ackstore.rules.mqtt.publish_problem`); :class:`Unencodable` when it cannot. paho packs
    them here once (the backstop: what it fails to pack raises before ``publish`` counts the
    message in flight)."""
    values = mqtt.property_values(headers, message_id) if client.protocol == paho.MQTTv5 else None
    problem = mqtt.publish_problem(topic, len(payload), values, qos=qos, maximum_packet_size=maximum_packet_size)
    if problem is not None:
        raise Unencodable(problem)
    if values is None:
        return None
    properties = Properties(PacketTypes.PUBLISH)
    for name, value in values.items():
        setattr(properties, name, value)
    properties.pack()
    return properties


class DropWatch:
    """Mosquitto's count of the messages its limits dropped (``$SYS/broker/publish/messages/dropped``,
    broker-wide), watched across the connector's sessions: every growth is said as an error."""

    def __init__(self, connection_id: str, counted: Callable[[int], None] | None = None) -> None:
        self.connection_id = connection_id
        self._counted = counted  # told each count the broker says (the metrics)
        self._count: int | None = None
        self._refused_said = False

    def subscribed(self, code: Any) -> None:
        if code.is_failure and not self._refused_said:
            self._refused_said = True
            log.warning("connector %s: the broker refused the subscription to %s (%s): if its queue limits drop "
                        "messages, this connector cannot say so (decisions #100)", self.connection_id, DROPPED, code)

    def counted(self, payload: bytes) -> None:
        try:
            count = int(payload)
        except ValueError:
            return
        if self._counted is not None:
            self._counted(count)
        before = self._count if self._count is not None else 0
        if count > before:
            log.error("connector %s: the broker has dropped %d messages (%d since it started), for this or another "
                      "subscriber: its in-flight or queue limit was reached, and they are lost — raise "
                      "max_queued_messages (decisions #100)", self.connection_id, count - before, count)
        self._count = count


def _ok(rc: MQTTErrorCode) -> None:
    """:class:`MqttLost` unless paho says the call succeeded."""
    if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
        raise MqttLost(paho.error_string(rc))


def _disconnect(client: paho.Client) -> None:
    """DISCONNECT, and let it leave: what was not PUBACKed stays in a persistent session."""
    if client.is_connected():
        client.disconnect()
        for _ in range(20):
            if client.loop(timeout=0.05) != MQTTErrorCode.MQTT_ERR_SUCCESS:
                break


def _matched_filter(topic: str) -> str:
    """The filter a subscription's messages match: a shared one's without ``$share/<group>/``."""
    if topic.startswith(SHARED):
        return topic[len(SHARED):].partition("/")[2]
    return topic


def _pending(sock: Any) -> int:
    """Bytes a TLS socket already decrypted (select does not see them)."""
    return sock.pending() if hasattr(sock, "pending") else 0
