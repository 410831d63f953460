"""The brokers ``benchmarks.broker`` measures through: what differs between RabbitMQ (AMQP 0.9.1),
RabbitMQ over AMQP 1.0 and an MQTT broker — publishing a backlog, the bare consumer the ledger is
compared with, and the connector's command. Everything else in the benchmark is the same for all.

AMQP 1.0 runs on a RabbitMQ node of the benchmark's own with the ``rabbitmq_amqp1_0`` plugin
(``tests/support/own_rabbitmq.py``): the backlog is published over AMQP 0.9.1 (as fast as the
other runs'), then received over 1.0 — by the connector, and by a bare consumer with the same
credit that accepts each batch after its commit.

The MQTT broker is, unless ``--mqtt URL`` names one, a Mosquitto of the benchmark's own with the
project's configuration (``tests/support/own_mosquitto.py``, ``docker/mosquitto.conf``). An MQTT
connector's messages are only kept for its persistent session once that session has subscribed,
so :meth:`Mqtt.prepare` runs each connector once (``--once``) before the backlog is published.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import paho.mqtt.client as paho
import pika
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ackstore.connectors.mqtt import PUBLISH_WINDOW
from benchmarks.cpu import listener_pid
from benchmarks.ingest import raw_engine, raw_insert

ROOT = Path(__file__).resolve().parent.parent
Items = list[tuple[str, bytes]]  # (message id, body)


class Amqp:
    """RabbitMQ: a queue per run, the connector consuming it."""

    name = "rabbitmq"

    def __init__(self, url: str) -> None:
        self.url = url

    def broker_pid(self) -> int | None:
        return listener_pid(pika.URLParameters(self.url).port)

    def prepare(self, address: str, commands: list[list[str]]) -> None:
        """Nothing: a queue keeps what is published to it before anyone consumes."""

    def holds_at_most(self, count: int, sessions: int, receive_maximum: int) -> int:
        """How many of ``count`` undecided deliveries the connector can hold: all (no prefetch)."""
        return count

    def raw_run(self, db_url: str, address: str, items: Items, batch: int, prefetch: int) -> float:
        """The baseline: ``items`` published, then consumed by :meth:`raw_consumer` (timed)."""
        self.publish(address, items)
        return self.raw_consumer(db_url, address, len(items), batch, prefetch)

    def publish(self, address: str, items: Items) -> float:
        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        channel = connection.channel()
        channel.queue_declare(address, durable=True)
        started = time.perf_counter()
        for message_id, body in items:
            channel.basic_publish("", address, body, pika.BasicProperties(message_id=message_id, delivery_mode=2))
        connection.close()
        return time.perf_counter() - started

    def raw_consumer(self, db_url: str, address: str, count: int, batch: int, prefetch: int) -> float:
        """Consume ``count`` messages, insert each batch into a bare table, ack after the commit."""
        engine = raw_engine(db_url)
        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        channel = connection.channel()
        channel.basic_qos(prefetch_count=prefetch)
        pending: list[tuple[int, str, bytes]] = []
        done = 0
        started = time.perf_counter()
        for method, properties, body in channel.consume(address, inactivity_timeout=0.05):
            if method is not None:
                pending.append((method.delivery_tag, properties.message_id, body))
            if pending and (len(pending) >= batch or method is None or done + len(pending) >= count):
                raw_insert(engine, [(message_id, body) for _, message_id, body in pending])
                channel.basic_ack(pending[-1][0], multiple=True)
                done += len(pending)
                pending = []
            if done >= count:
                break
        seconds = time.perf_counter() - started
        channel.cancel()
        connection.close()
        engine.dispose()
        return seconds

    def connectors(self, address: str, sessions: int, batch: int, prefetch: int, receive_maximum: int,
                   workdir: Path) -> list[list[str]]:
        if sessions != 1:
            raise SystemExit("--sessions is for MQTT's shared subscriptions")
        return [["connect", "amqp", "--url", self.url, "--connection-id", "bench", "--queue", address,
                 "--requested-acks", "twin-persisted", "--batch-size", str(batch), "--prefetch", str(prefetch)]]

    def ready_again(self, address: str, count: int, timeout_s: float = 1800) -> float | None:
        """Seconds until the queue holds ``count`` messages ready again (what a stopped connector
        gave back: the broker's side of the give-back), or None past ``timeout_s``."""
        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        channel = connection.channel()
        started = time.perf_counter()
        try:
            while time.perf_counter() - started < timeout_s:
                if channel.queue_declare(address, passive=True).method.message_count >= count:  # ready ones
                    return time.perf_counter() - started
                time.sleep(0.1)
            return None
        finally:
            connection.close()

    def delete(self, address: str) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        connection.channel().queue_delete(address)
        connection.close()


class Mqtt:
    """An MQTT 5 broker: a topic per run, connectors sharing one subscription ``$share/bench/…``."""

    name = "mosquitto"

    def __init__(self, url: str, pid: int | None) -> None:
        self.url = url
        self._pid = pid

    def broker_pid(self) -> int | None:
        return self._pid

    def _client(self, client_id: str, **kwargs: Any) -> paho.Client:
        client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5, **kwargs)
        client.max_inflight_messages_set(10_000)
        client.max_queued_messages_set(0)
        return client

    def _connect(self, client: paho.Client, persistent: bool = False) -> None:
        parts = urlsplit(self.url)
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 3600 if persistent else 0
        done = threading.Event()
        client.on_connect = lambda *_: done.set()
        client.connect(parts.hostname or "127.0.0.1", parts.port or 1883, clean_start=not persistent,
                       properties=properties)
        client.loop_start()
        if not done.wait(30):
            raise SystemExit(f"no CONNACK from {self.url}")

    def holds_at_most(self, count: int, sessions: int, receive_maximum: int) -> int:
        """How many of ``count`` undecided messages the sessions hold: their in-flight bounds."""
        return min(count, sessions * receive_maximum)

    def prepare(self, address: str, commands: list[list[str]]) -> None:
        """Each connector's session subscribed (a run with ``--once``), so the broker keeps the
        backlog for it."""
        for command in commands:
            subprocess.run([*command, "--once"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=300)

    def publish(self, address: str, items: Items) -> float:
        client = self._client(f"bench-publisher-{time.monotonic_ns()}")
        self._connect(client)
        started = time.perf_counter()
        infos: list[Any] = []
        for message_id, body in items:
            properties = Properties(PacketTypes.PUBLISH)
            properties.UserProperty = [("message-id", message_id)]
            infos.append(client.publish(address, body, qos=1, properties=properties))
            if len(infos) >= PUBLISH_WINDOW:  # packet ids are 16 bits: a window of them in flight
                _published(infos)
        _published(infos)
        seconds = time.perf_counter() - started
        client.disconnect()
        client.loop_stop()
        return seconds

    def raw_run(self, db_url: str, address: str, items: Items, batch: int, prefetch: int) -> float:
        """The baseline: a bare consumer of a persistent session of its own, subscribed before
        ``items`` are published; each batch inserted into a bare table and PUBACKed after the
        commit (timed from the end of publishing)."""
        engine = raw_engine(db_url)
        client_id = f"bench-raw-{time.monotonic_ns()}"
        client = self._client(client_id, manual_ack=True)
        arrived: list[paho.MQTTMessage] = []
        lock = threading.Lock()

        def on_message(_c: Any, _u: Any, message: paho.MQTTMessage) -> None:
            with lock:
                arrived.append(message)

        client.on_message = on_message
        self._connect(client, persistent=True)
        subscribed = threading.Event()
        client.on_subscribe = lambda *_: subscribed.set()
        client.subscribe(address, 1)
        subscribed.wait(30)
        self.publish(address, items)
        started = time.perf_counter()
        done = 0
        while done < len(items):
            with lock:
                taken, arrived[:] = arrived[:batch], arrived[batch:]
            if not taken:
                time.sleep(0.005)
                continue
            raw_insert(engine, [(dict(m.properties.UserProperty)["message-id"], m.payload) for m in taken])
            for message in taken:
                client.ack(message.mid, 1)
            done += len(taken)
        seconds = time.perf_counter() - started
        client.disconnect()
        client.loop_stop()
        engine.dispose()
        return seconds

    def ready_again(self, address: str, count: int, timeout_s: float = 1800) -> float | None:
        """None: a persistent session keeps what it was given (MQTT gives nothing back)."""
        return None

    def connectors(self, address: str, sessions: int, batch: int, prefetch: int, receive_maximum: int,
                   workdir: Path) -> list[list[str]]:
        commands = []
        for k in range(sessions):
            document = {
                "id": "bench", "connectionType": "mqtt-5", "uri": self.url,
                "sources": [{"addresses": [f"$share/bench/{address}" if sessions > 1 else address], "qos": 1,
                             "acknowledgementRequests": {"includes": ["twin-persisted"]}}],
                "specificConfig": {"clientId": f"bench-{k}", "receiveMaximum": receive_maximum},
            }
            path = workdir / f"connection-{k}.json"
            path.write_text(json.dumps(document))
            commands.append(["connect", "mqtt", "--config", str(path), "--batch-size", str(batch)])
        return commands

    def delete(self, address: str) -> None:
        """Nothing to delete: the run's topic and sessions end with the broker."""


class Amqp10(Amqp):
    """RabbitMQ over AMQP 1.0: a queue per run, received from its ``/amq/queue/<name>`` address."""

    def __init__(self, url: str, amqp10_url: str, credit: int) -> None:
        super().__init__(url)
        self.amqp10_url = amqp10_url
        self.credit = credit

    def holds_at_most(self, count: int, sessions: int, receive_maximum: int) -> int:
        """How many of ``count`` undecided deliveries the connector holds: its link credit."""
        return min(count, self.credit)

    def raw_consumer(self, db_url: str, address: str, count: int, batch: int, prefetch: int) -> float:
        """Receive ``count`` messages with the connector's credit, insert each batch into a bare
        table, accept it after the commit (one more credit for each)."""
        from ackstore.connectors.amqp10 import ProtonConnection
        from ackstore.rules import amqp10

        engine = raw_engine(db_url)
        pending: list[tuple[Any, str, bytes]] = []
        connection = ProtonConnection(self.amqp10_url, f"bench-raw-{time.monotonic_ns()}",
                                      received=lambda delivery, message, _problem: pending.append(
                                          (delivery, str(message.id), amqp10.body(message.body))))
        receiver = connection.receiver(f"/amq/queue/{address}", "bench-raw")
        connection.wait(lambda: connection.attached(receiver), "attaching")
        receiver.flow(self.credit)
        done = 0
        started = time.perf_counter()
        while done < count:
            connection.step(0.005)
            if pending and (len(pending) >= batch or done + len(pending) >= count):
                taken, pending[:] = pending[:batch], pending[batch:]
                raw_insert(engine, [(message_id, body) for _, message_id, body in taken])
                for delivery, _, _ in taken:
                    delivery.update(delivery.ACCEPTED)
                    delivery.settle()
                receiver.flow(len(taken))
                done += len(taken)
        seconds = time.perf_counter() - started
        connection.close()
        engine.dispose()
        return seconds

    def connectors(self, address: str, sessions: int, batch: int, prefetch: int, receive_maximum: int,
                   workdir: Path) -> list[list[str]]:
        if sessions != 1:
            raise SystemExit("--sessions is for MQTT's shared subscriptions")
        return [["connect", "amqp10", "--url", self.amqp10_url, "--connection-id", "bench", "--address",
                 f"/amq/queue/{address}", "--requested-acks", "twin-persisted", "--batch-size", str(batch),
                 "--credit", str(self.credit)]]


def _published(infos: list[Any]) -> None:
    for info in infos:
        info.wait_for_publish(300)
        if not info.is_published():
            raise SystemExit("the broker did not PUBACK a publish in 300 s")
    infos.clear()


@contextmanager
def own_amqp10_node() -> Iterator[Any]:
    """A RabbitMQ node of the benchmark's own with the AMQP 1.0 plugin (AMQP 0.9.1 and 1.0 on one port)."""
    from tests.support.own_rabbitmq import OwnRabbitMQ

    with OwnRabbitMQ(plugins=("rabbitmq_amqp1_0",)) as node:
        yield node


@contextmanager
def own_mosquitto() -> Iterator[tuple[str, int | None]]:
    """A Mosquitto of the benchmark's own, with the project's configuration: (URL, PID)."""
    from tests.support.own_mosquitto import OwnMosquitto

    with OwnMosquitto() as broker:
        yield broker.url, broker.pid
