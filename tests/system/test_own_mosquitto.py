"""What Mosquitto 2.0.11 (Debian's) does that a QoS-1 connector withholding PUBACK for about a
minute is designed around, measured on brokers of our own (tests/support/own_mosquitto.py, the
project's docker/mosquitto.conf) with paho-mqtt 2.x clients. No mocks: each test fails if the
broker stops behaving so.

* A persistent session (3.1.1 clean session false; MQTT 5 clean start false *with* a Session
  Expiry Interval) keeps QoS-1 messages published while it is disconnected.
* Messages not PUBACKed are sent again only when the session reconnects (never on the same
  connection), with DUP set and the same packet id; PUBACKed ones are not.
* In flight at once per session: max_inflight_messages (default 20) for 3.1.1 and for an MQTT 5
  client without Receive Maximum; an MQTT 5 client's Receive Maximum replaces it (larger or
  smaller). A defect of 2.0.11: a PUBACK of the message at position k of the in-flight list
  releases up to N - k queued messages, so after PUBACKs more than N may be in flight.
* A clean restart keeps sessions, unacknowledged and queued messages; after SIGKILL only what
  the last autosave (every ~2 s with the project's config) wrote survives.
* Above the queue limit, messages are dropped silently for the publisher (PUBACK Success); seen
  in the log (one line per connection of the subscriber) and $SYS/broker/publish/messages/dropped.
* A shared subscription splits messages round robin between sessions, each with its own
  in-flight bound; a disconnected member keeps its messages (and gets new ones) in its session.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from typing import Callable, Iterator, NamedTuple

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.own_mosquitto import PROJECT_CONFIG, OwnMosquitto

V311, V5 = mqtt.MQTTv311, mqtt.MQTTv5
VERSIONS = pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5"])
QUIET_S = 0.4  # how long "nothing more arrives" is watched
DROP_LINE = "Outgoing messages are being dropped for client {}."


class Received(NamedTuple):
    mid: int
    payload: str
    dup: bool


class Subscriber:
    """One connection of a session, paho's network loop in its own thread, PUBACK withheld
    (``manual_ack``) until ``ack`` or ``ack_everything``."""

    def __init__(self, broker: OwnMosquitto, client_id: str, version: int = V311, *, clean: bool = False,
                 session_expiry: int | None = 3600, receive_maximum: int | None = None) -> None:
        self.client_id = client_id
        self.messages: list[Received] = []
        self._changed = threading.Condition()
        self._acking = False
        self._suback = threading.Event()
        connected = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version,
                                  manual_ack=True, reconnect_on_failure=False,
                                  **({} if version == V5 else {"clean_session": clean}))
        self.client.on_connect = lambda _c, _u, flags, reason, props: (
            setattr(self, "connack", (flags.session_present, reason, props)), connected.set())
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *_: self._suback.set()
        options: dict = {}
        if version == V5:
            properties = Properties(PacketTypes.CONNECT)
            if session_expiry is not None:
                properties.SessionExpiryInterval = session_expiry
            if receive_maximum is not None:
                properties.ReceiveMaximum = receive_maximum
            options = {"clean_start": clean, "properties": properties}
        self.client.connect("127.0.0.1", broker.port, keepalive=30, **options)
        self.client.loop_start()
        if not connected.wait(10):
            self.vanish()
            raise AssertionError(f"{client_id}: no CONNACK")
        assert not self.connack[1].is_failure, self.connack

    @property
    def session_present(self) -> bool:
        return bool(self.connack[0])

    def _on_message(self, client: mqtt.Client, _userdata: object, message: mqtt.MQTTMessage) -> None:
        with self._changed:
            self.messages.append(Received(message.mid, message.payload.decode(), bool(message.dup)))
            if self._acking:
                client.ack(message.mid, message.qos)
            self._changed.notify_all()

    def subscribe(self, topic: str) -> Subscriber:
        self._suback.clear()
        self.client.subscribe(topic, qos=1)
        assert self._suback.wait(10), f"{self.client_id}: no SUBACK"
        return self

    def wait_for(self, count: int, timeout: float = 10, quiet: float = QUIET_S) -> list[Received]:
        """At least ``count`` messages (fails after ``timeout``), then ``quiet`` seconds for any
        more to come: all it got."""
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.messages) >= count, timeout), \
                f"{self.client_id}: {len(self.messages)} messages, expected {count}"
        time.sleep(quiet)
        with self._changed:
            return list(self.messages)

    def ack(self, *received: Received) -> None:
        for message in received:
            self.client.ack(message.mid, 1)

    def ack_everything(self) -> None:
        """PUBACK what came and, from now on, every message as it arrives."""
        with self._changed:
            self._acking = True
            self.ack(*self.messages)

    def disconnect(self) -> None:
        """A clean DISCONNECT (the session stays: it is persistent)."""
        self.client.disconnect()
        self.client.loop_stop()

    def vanish(self) -> None:
        """The connection closes without DISCONNECT, as when the connector's process dies (paho's
        thread sees it closed at once and, not reconnecting, ends)."""
        sock = self.client.socket()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.client.loop_stop()


@pytest.fixture
def subscriber() -> Iterator[Callable[..., Subscriber]]:
    """Subscriber(...) whose connections are closed when the test ends, whatever happened."""
    made: list[Subscriber] = []

    def make(*args, **kwargs) -> Subscriber:
        made.append(Subscriber(*args, **kwargs))
        return made[-1]

    yield make
    for one in made:
        one.vanish()


def publish(broker: OwnMosquitto, topic: str, payloads: list[str], version: int = V311) -> list[mqtt.ReasonCode]:
    """QoS 1, every PUBACK awaited; the PUBACKs' reason codes (MQTT 5; 3.1.1 has none: Success)."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{uuid.uuid4().hex[:10]}", protocol=version)
    client.max_inflight_messages_set(0)  # paho's own window (20) would only slow us down
    reasons: dict[int, mqtt.ReasonCode] = {}
    client.on_publish = lambda _c, _u, mid, reason, _p: reasons.__setitem__(mid, reason)
    client.connect("127.0.0.1", broker.port, keepalive=30)
    client.loop_start()
    try:
        sent = [client.publish(topic, payload, qos=1) for payload in payloads]
        for info in sent:
            info.wait_for_publish(timeout=10)
            assert info.is_published(), f"no PUBACK for {info.mid}"
    finally:
        client.disconnect()
        client.loop_stop()
    return [reasons[info.mid] for info in sent]


def fresh() -> tuple[str, str]:
    """A client id and a topic no other test uses."""
    name = uuid.uuid4().hex[:10]
    return f"ackstore-{name}", f"ackstore/{name}"


def payloads(count: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


# a. Persistent sessions keep what is published while they are away


@VERSIONS
def test_a_persistent_session_keeps_qos1_messages_published_while_it_is_disconnected(own_mosquitto, subscriber,
                                                                                     version) -> None:
    client_id, topic = fresh()
    subscriber(own_mosquitto, client_id, version).subscribe(topic).disconnect()
    assert all(not reason.is_failure for reason in publish(own_mosquitto, topic, payloads(5), V5))

    back = subscriber(own_mosquitto, client_id, version)

    assert back.session_present
    assert [(m.payload, m.dup) for m in back.wait_for(5)] == [(p, False) for p in payloads(5)]


def test_an_mqtt5_session_without_session_expiry_ends_at_disconnect(own_mosquitto, subscriber) -> None:
    """Clean start false is not enough in MQTT 5: the Session Expiry Interval defaults to 0."""
    client_id, topic = fresh()
    subscriber(own_mosquitto, client_id, V5, session_expiry=None).subscribe(topic).disconnect()
    publish(own_mosquitto, topic, payloads(3))

    back = subscriber(own_mosquitto, client_id, V5, session_expiry=None)

    assert not back.session_present
    assert back.wait_for(0) == []


# b. What is not PUBACKed comes again, on the next connection of the session


@VERSIONS
@pytest.mark.parametrize("leaving", ["disconnect", "vanish"])
def test_b_unacknowledged_messages_come_again_with_dup_and_the_same_packet_id(own_mosquitto, subscriber, version,
                                                                              leaving) -> None:
    client_id, topic = fresh()
    first = subscriber(own_mosquitto, client_id, version).subscribe(topic)
    publish(own_mosquitto, topic, payloads(6))
    got = first.wait_for(6)  # the quiet wait: nothing is sent twice on the same connection
    assert [(m.payload, m.dup) for m in got] == [(p, False) for p in payloads(6)]
    first.ack(*got[:3])
    time.sleep(0.2)
    getattr(first, leaving)()

    again = subscriber(own_mosquitto, client_id, version)

    assert again.session_present
    assert again.wait_for(3) == [m._replace(dup=True) for m in got[3:]]  # same mid, DUP set; the acked ones never


def test_b_nothing_is_resent_while_the_connection_lasts(own_mosquitto, subscriber) -> None:
    client_id, topic = fresh()
    one = subscriber(own_mosquitto, client_id).subscribe(topic)
    publish(own_mosquitto, topic, payloads(2))
    one.wait_for(2)
    time.sleep(1.5)
    assert len(one.messages) == 2


# c. The in-flight bound


@pytest.mark.parametrize(("max_inflight", "bound"), [(None, 20), (7, 7)], ids=["default", "7"])
def test_c_mqtt311_in_flight_bound_is_max_inflight_messages(subscriber, max_inflight, bound) -> None:
    client_id, topic = fresh()
    with OwnMosquitto(max_inflight_messages=max_inflight) as broker:
        one = subscriber(broker, client_id).subscribe(topic)
        publish(broker, topic, payloads(60))
        got = one.wait_for(bound)
        assert len(got) == bound

        one.ack(got[-1])  # the newest: one more is let through
        assert [m.payload for m in one.wait_for(bound + 1)] == payloads(bound + 1)


@pytest.mark.parametrize(("max_inflight", "receive_maximum", "bound"),
                         [(7, None, 7), (7, 30, 30), (30, 5, 5)], ids=["no-RM", "RM-above", "RM-below"])
def test_c_mqtt5_receive_maximum_replaces_max_inflight_messages(subscriber, max_inflight, receive_maximum,
                                                                bound) -> None:
    client_id, topic = fresh()
    with OwnMosquitto(max_inflight_messages=max_inflight) as broker:
        one = subscriber(broker, client_id, V5, receive_maximum=receive_maximum).subscribe(topic)
        publish(broker, topic, payloads(60))
        got = one.wait_for(bound)
        assert len(got) == bound
        one.ack(got[-1])
        assert len(one.wait_for(bound + 1)) == bound + 1


@VERSIONS
def test_c_the_project_config_lets_thousands_be_in_flight(own_mosquitto, subscriber, version) -> None:
    client_id, topic = fresh()
    one = subscriber(own_mosquitto, client_id, version).subscribe(topic)
    publish(own_mosquitto, topic, payloads(3000))
    assert len(one.wait_for(3000)) == 3000  # none PUBACKed


def test_c_in_2_0_11_a_puback_of_the_oldest_releases_a_whole_window(subscriber) -> None:
    """db__message_delete_outgoing counts the in-flight messages *before* the acknowledged one:
    acknowledging the oldest lets up to N queued messages through, whatever is in flight."""
    client_id, topic = fresh()
    with OwnMosquitto(max_inflight_messages=5) as broker:
        one = subscriber(broker, client_id).subscribe(topic)
        publish(broker, topic, payloads(40))
        got = one.wait_for(5)

        one.ack(got[0])

        assert [m.payload for m in one.wait_for(10)] == payloads(10)  # 9 unacknowledged in flight, bound 5


# d. Restarts


@VERSIONS
def test_d_a_clean_restart_keeps_sessions_unacknowledged_and_queued_messages(subscriber, version) -> None:
    client_id, topic = fresh()
    with OwnMosquitto() as broker:
        first = subscriber(broker, client_id, version).subscribe(topic)
        publish(broker, topic, payloads(4))
        got = first.wait_for(4)
        first.ack(got[0])
        time.sleep(0.2)
        first.vanish()
        publish(broker, topic, payloads(2, "queued-"))

        broker.stop()  # SIGTERM: Mosquitto saves its database on the way out
        assert broker.database.exists()
        broker.start()
        again = subscriber(broker, client_id, version)

        assert again.session_present
        back = again.wait_for(5)
        assert back[:3] == [m._replace(dup=True) for m in got[1:]]  # same mids, DUP set
        assert [(m.payload, m.dup) for m in back[3:]] == [(p, False) for p in payloads(2, "queued-")]


def _saves(broker: OwnMosquitto) -> int:
    return broker.log.read_text().count("Saving in-memory database")


def _next_save(broker: OwnMosquitto, timeout: float = 5) -> float:
    """Waits for an autosave to start after now; its time (monotonic)."""
    before, deadline = _saves(broker), time.monotonic() + timeout
    while _saves(broker) == before:
        assert time.monotonic() < deadline, "no autosave"
        time.sleep(0.01)
    return time.monotonic()


@pytest.mark.slow
def test_d_after_sigkill_only_what_the_last_autosave_wrote_survives(subscriber) -> None:
    """The project's autosave_interval 1 (by time): a save every ~2 s. What was in flight when a
    save ran comes back after a crash; what came after it is gone, though its publisher got
    its PUBACK. (`information` logging only to see the saves.)"""
    client_id, topic = fresh()
    with OwnMosquitto(log_type=["error", "warning", "notice", "information"]) as broker:
        first = subscriber(broker, client_id, V5).subscribe(topic)
        publish(broker, topic, payloads(3, "saved-"))
        saved = first.wait_for(3)
        one_save = _next_save(broker)  # it wrote the first three
        at = _next_save(broker)
        assert 1.0 < at - one_save < 5.0  # the window a crash loses (~2 s; wider for a loaded machine)
        assert all(not reason.is_failure for reason in publish(broker, topic, payloads(2, "lost-"), V5))
        assert [m.payload for m in first.wait_for(5, quiet=0)] == payloads(3, "saved-") + payloads(2, "lost-")
        assert time.monotonic() - at < 1, "the crash must come before the next save"
        broker.kill()
        first.vanish()

        broker.start()
        again = subscriber(broker, client_id, V5)

        assert again.session_present
        assert again.wait_for(3) == [m._replace(dup=True) for m in saved]


# e. Overflow


def test_e_above_the_queue_limit_messages_are_dropped_silently_for_the_publisher(subscriber) -> None:
    client_id, topic = fresh()
    with OwnMosquitto(max_queued_messages=50, max_inflight_messages=20, sys_interval=1) as broker:
        monitor = subscriber(broker, f"{client_id}-monitor", clean=True)
        monitor.ack_everything()
        monitor.subscribe("$SYS/broker/publish/messages/dropped")  # retained, QoS 0
        one = subscriber(broker, client_id).subscribe(topic)

        reasons = publish(broker, topic, payloads(100), V5)  # connected, PUBACK withheld: 20 in flight + 50 queued

        assert {reason.value for reason in reasons} == {0}  # Success, for the 30 dropped too
        assert len(one.wait_for(20)) == 20
        one.ack_everything()
        assert [m.payload for m in one.wait_for(70)] == payloads(70)
        one.disconnect()

        reasons = publish(broker, topic, payloads(100, "offline-"), V5)  # disconnected: 50 in all are kept

        assert {reason.value for reason in reasons} == {0}
        back = subscriber(broker, client_id)
        back.ack_everything()
        assert [m.payload for m in back.wait_for(50)] == payloads(50, "offline-")
        assert broker.log.read_text().count(DROP_LINE.format(client_id)) == 1  # not one per message
        deadline = time.monotonic() + 5  # updated every sys_interval + 1 s
        while not monitor.messages or monitor.messages[-1].payload != "80":
            assert time.monotonic() < deadline, monitor.messages
            time.sleep(0.05)


def test_e_the_only_unsuccessful_mqtt5_puback_is_for_no_subscribers(own_mosquitto) -> None:
    _, topic = fresh()
    [reason] = publish(own_mosquitto, topic, ["nobody"], V5)
    assert (reason.value, reason.getName()) == (16, "No matching subscribers")


def test_e_the_project_config_keeps_what_a_smaller_limit_drops(own_mosquitto, subscriber) -> None:
    client_id, topic = fresh()
    one = subscriber(own_mosquitto, client_id).subscribe(topic)
    publish(own_mosquitto, topic, payloads(100))
    assert len(one.wait_for(100)) == 100  # all in flight, none PUBACKed
    one.vanish()
    publish(own_mosquitto, topic, payloads(1100, "offline-"))

    back = subscriber(own_mosquitto, client_id)

    assert len(back.wait_for(1200)) == 1200
    assert DROP_LINE.format(client_id) not in own_mosquitto.log.read_text()


def test_e_mosquittos_default_queue_keeps_1000_of_a_disconnected_session(subscriber) -> None:
    client_id, topic = fresh()
    with OwnMosquitto(max_queued_messages=None) as broker:  # Mosquitto's default
        subscriber(broker, client_id).subscribe(topic).disconnect()
        publish(broker, topic, payloads(1100))

        back = subscriber(broker, client_id)
        back.ack_everything()

        assert [m.payload for m in back.wait_for(1000)] == payloads(1000)
        assert DROP_LINE.format(client_id) in broker.log.read_text()


# f. Shared subscriptions


def test_f_a_shared_subscription_splits_messages_and_a_disconnected_member_keeps_its_share(subscriber) -> None:
    a_id, topic = fresh()
    b_id = f"{a_id}-b"
    group = f"$share/ackstore/{topic}"
    with OwnMosquitto() as broker:
        a = subscriber(broker, a_id, V5, receive_maximum=5).subscribe(group)
        b = subscriber(broker, b_id, V5, receive_maximum=5).subscribe(group)

        publish(broker, topic, payloads(20))

        a_first, b_first = a.wait_for(5), b.wait_for(5)
        assert len(a_first) == len(b_first) == 5  # each session its own bound
        assert not {m.payload for m in a_first} & {m.payload for m in b_first}
        a.vanish()
        b.ack_everything()
        b_all = b.wait_for(10)
        assert len(b_all) == 10  # A's 10 (5 in flight, 5 queued) stay A's
        publish(broker, topic, payloads(6, "later-"))
        assert len(b.wait_for(13)) == 13  # round robin goes on: 3 of 6 to the disconnected A

        a_again = subscriber(broker, a_id, V5)
        a_again.ack_everything()

        assert a_again.session_present
        a_all = a_again.wait_for(13)
        assert a_all[:5] == [m._replace(dup=True) for m in a_first]
        assert not any(m.dup for m in a_all[5:])
        assert sorted(m.payload for m in a_all + b.messages) == sorted(payloads(20) + payloads(6, "later-"))


def test_own_mosquitto_runs_the_project_config_with_its_own_port_and_folder(own_mosquitto) -> None:
    config = own_mosquitto.config.read_text()
    assert f"listener {own_mosquitto.port} 127.0.0.1" in config and own_mosquitto.port != 1883
    assert f"persistence_location {own_mosquitto.root}/" in config
    keys = [line.split()[0] for line in PROJECT_CONFIG.read_text().splitlines() if line and not line.startswith("#")]
    assert "listener" not in keys and "persistence_location" not in keys
    assert own_mosquitto.url == f"mqtt://127.0.0.1:{own_mosquitto.port}" and own_mosquitto.answers()
