"""Helpers for tests against the machine's RabbitMQ (127.0.0.1:5672, guest/guest).

Every test gets queues of its own (a random prefix), deleted afterwards. The connector runs as a
real subprocess (``ackstore connect amqp``), so that it can be SIGTERMed or killed with -9.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import IO, Any, Callable, Iterable

import pika
from tests.support.no_secrets import assert_no_password
from tests.support.paths import ROOT

AMQP_URL = os.environ.get("ACKSTORE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


class Broker:
    """Queues for one test, and what the test needs to look at them."""

    def __init__(self, url: str = AMQP_URL) -> None:
        self.prefix = f"ackstore-test-{uuid.uuid4().hex[:10]}"
        self.connection = pika.BlockingConnection(pika.URLParameters(url))
        self.channel = self.connection.channel()
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def queue(self, name: str) -> str:
        full = f"{self.prefix}.{name}"
        self.channel.queue_declare(full, durable=True)
        self.queues.append(full)
        return full

    def exchange(self, name: str) -> str:
        full = f"{self.prefix}.{name}"
        self.channel.exchange_declare(full, exchange_type="direct", durable=False)
        self.exchanges.append(full)
        return full

    def depth(self, queue: str) -> int:
        """Messages ready in ``queue`` (deliveries held unacknowledged by a consumer do not count)."""
        return self.channel.queue_declare(queue, passive=True).method.message_count

    def unsettled(self, queue: str) -> int:
        """Messages in ``queue`` ready or delivered and not settled yet (``rabbitmqctl``)."""
        listed = subprocess.run(["rabbitmqctl", "-q", "list_queues", "name", "messages"],
                                capture_output=True, text=True, timeout=120, check=True)
        counts = dict(line.split("\t") for line in listed.stdout.splitlines() if "\t" in line)
        return int(counts[queue])

    def publish(self, queue: str, body: bytes, **properties: Any) -> None:
        self.channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, **properties))

    def drain(self, queue: str) -> list[tuple[Any, bytes]]:
        """Every message now ready in ``queue`` (properties, body), acknowledged."""
        taken = []
        while True:
            method, properties, body = self.channel.basic_get(queue, auto_ack=True)
            if method is None:
                return taken
            taken.append((properties, body))

    def drain_json(self, queue: str) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.drain(queue)]

    def close(self) -> None:
        for queue in self.queues:
            self.channel.queue_delete(queue)
        for exchange in self.exchanges:
            self.channel.exchange_delete(exchange)
        self.connection.close()


def connector(database_url: str, *args: str, env: dict[str, str] | None = None, url: str = AMQP_URL,
              log: IO[str] | None = None) -> subprocess.Popen:
    """``ackstore connect amqp ARGS`` as a subprocess; its log goes to a pipe (stderr), or to the
    file ``log`` (a pipe nobody reads while the connector runs fills up and stalls it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ackstore.cli", "--database-url", database_url, "connect", "amqp",
         "--url", url, *args],
        cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE if log is None else subprocess.DEVNULL,
        stderr=subprocess.PIPE if log is None else log, text=True,
    )


def stop(process: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    """SIGTERM, then the exit status and the log — which shows no URL's password (decisions #120)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _, log = process.communicate(timeout=timeout)
    assert_no_password(log or "")
    return process.returncode, log


def assert_took_them_all(log: str, done: object, running: bool, code: int) -> None:
    """A connector given hostile messages between good ones: what the test waited for (``done``)
    happened while it ran on (``running``), it then stopped cleanly, and its log holds no
    traceback, no recursion and no reconnect."""
    assert done and running, log
    assert code == 0, log
    assert "Traceback" not in log and "RecursionError" not in log and "reconnects 0;" in log, log


def kill_9(process: subprocess.Popen) -> None:
    process.kill()
    process.communicate(timeout=30)


def wait_for(condition: Callable[[], Any], timeout: float = 60, what: str = "condition", raises: bool = True) -> Any:
    """``condition()``'s first true value within ``timeout``; else an AssertionError (or, without
    ``raises``, None: the test then says what it knows, such as a connector's log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    if not raises:
        return None
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def publish_all(broker: Broker, queue: str, envelopes: Iterable[dict[str, Any]], **properties: Any) -> int:
    count = 0
    for envelope in envelopes:
        headers = envelope.get("headers", {})
        broker.publish(queue, json.dumps(envelope).encode(), message_id=headers.get("message-id", uuid.uuid4().hex),
                       correlation_id=headers.get("correlation-id"), **properties)
        count += 1
    return count


def publish_committed(url: str, queue: str, envelopes: list[dict[str, Any]]) -> None:
    """Persistent messages to a durable queue in one AMQP transaction: once it commits they are on
    the node's disk and survive its kill (one round trip; a confirm per message took ~30 s here)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.tx_select()
    for envelope in envelopes:
        channel.basic_publish("", queue, json.dumps(envelope).encode(), pika.BasicProperties(
            delivery_mode=2, message_id=envelope["headers"]["message-id"],
            correlation_id=envelope["headers"]["correlation-id"]))
    channel.tx_commit()
    connection.close()
