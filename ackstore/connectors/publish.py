"""``ackstore publish amqp``: send Ditto Protocol messages to a queue, with publisher confirms.

One JSON message per line. Each gets a fresh AMQP ``message_id`` unless its headers carry a
``message-id``; its ``correlation-id`` and ``reply-to`` headers become the AMQP properties of
the same name. A line that is not JSON is sent as it is (useful to test rejections).
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable

import pika
from pika.exceptions import NackError, UnroutableError

from ackstore.rules import errors, wire


def _properties(line: bytes) -> pika.BasicProperties:
    try:
        envelope = errors.parse_json_text(line)
    except errors.DittoError:
        envelope = None
    headers: dict[str, Any] = {}
    if isinstance(envelope, dict) and isinstance(envelope.get("headers"), dict):
        headers = {str(k).lower(): v for k, v in envelope["headers"].items()}

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
