"""Helpers for tests against an AMQP 1.0 broker of the test's own (a RabbitMQ node with the
``rabbitmq_amqp1_0`` plugin, the ``own_amqp10`` fixture): the connector as a real subprocess
(``ackstore connect amqp10``), a sender that waits for the broker's outcome of each message, and
a receiver that accepts what an address holds.

RabbitMQ 3's AMQP 1.0 addresses: ``/amq/queue/<name>`` is an existing queue (declared over AMQP
0.9.1 by :class:`tests.support.broker.Broker` on the same node).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import IO, Any, Iterable, Union

from proton import Message
from proton.utils import BlockingConnection

from ackstore.connectors.amqp10 import sasl_options
from tests.support.broker import ROOT
from tests.support.deep_json import roomy_stack


@dataclass(frozen=True)
class AmqpValue:
    """A body sent as this AMQP value (a list, a map, a described value: any type), not as text."""

    value: Any


Envelope = Union[dict[str, Any], bytes, AmqpValue]


def address(queue: str) -> str:
    """The AMQP 1.0 address of a RabbitMQ queue."""
    return f"/amq/queue/{queue}"


def amqp10_connector(database_url: str, url: str, *args: str, env: dict[str, str] | None = None,
                     log: IO[str] | None = None) -> subprocess.Popen:
    """``ackstore connect amqp10 --url URL ARGS`` as a subprocess (log to a pipe, or to ``log``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ackstore.cli", "--database-url", database_url, "connect", "amqp10", "--url", url, *args],
        cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE if log is None else subprocess.DEVNULL,
        stderr=subprocess.PIPE if log is None else log, text=True,
    )


def send(url: str, to: str, envelopes: Iterable[Envelope], *, reply_to: str | None = None,
         text_body: bool = True, message_id: Any = None, **properties: Any) -> int:
    """Send each envelope (JSON as an ``amqp-value`` string, as Ditto sends text, or — with
    ``text_body=False`` or bytes — a ``data`` section, or an :class:`AmqpValue` as it is) with a
    message id of its own (its ``message-id`` header, else ``message_id``: any AMQP type, binary
    too, else a new one), and wait for the broker to accept each; how many were sent. Values and
    properties may nest as deep as a sender of another language nests them (proton's encoder
    nests on Python's stack)."""
    connection = BlockingConnection(url, timeout=30, **sasl_options(url))
    try:
        sender = connection.create_sender(to)
        sent = 0
        for envelope in envelopes:
            headers = envelope.get("headers", {}) if isinstance(envelope, dict) else {}
            if isinstance(envelope, AmqpValue):
                body: Any = envelope.value
            else:
                body = envelope if isinstance(envelope, bytes) else json.dumps(envelope)
                if not text_body and isinstance(body, str):
                    body = body.encode()
            fields = {"correlation_id": headers.get("correlation-id"), "reply_to": reply_to, **properties}
            given = headers.get("message-id", message_id)
            with roomy_stack():
                sender.send(Message(body=body, id=uuid.uuid4().hex if given is None else given, durable=True,
                                    **fields))
            sent += 1
        return sent
    finally:
        connection.close()


def receive(url: str, source: str, *, wait_s: float = 1.0) -> list[Message]:
    """Every message ``source`` holds now (until none comes for ``wait_s``), each accepted."""
    connection = BlockingConnection(url, timeout=30, **sasl_options(url))
    taken: list[Message] = []
    try:
        receiver = connection.create_receiver(source, credit=100)
        while True:
            try:
                taken.append(receiver.receive(timeout=wait_s))
            except Exception as error:  # proton's Timeout: nothing more
                if type(error).__name__ != "Timeout":
                    raise
                return taken
            receiver.accept()
    finally:
        connection.close()


def bodies(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The JSON each message carries (an ``amqp-value`` string or a ``data`` section)."""
    return [json.loads(m.body if isinstance(m.body, str) else bytes(m.body)) for m in messages]
