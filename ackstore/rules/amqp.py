"""What an AMQP 0.9.1 connection does with a message, as pure rules (A.3, issue 37).

* :func:`message_key` keys a consumed message for de-duplication (A.3): its ``message_id``.
* :func:`publish_problem` is what an AMQP 0.9.1 publish can carry (shortstr limits, field
  tables): what it refuses is dropped, never sent (issue 37); :func:`correlation_id_property`
  is a correlation id as the property, when it can be one.

What every transport shares (the envelope a message becomes, how a decision is settled: B.9's
AMQP 0.9.1 row is :func:`ackstore.rules.connectivity.settling`) is :mod:`ackstore.rules.connectivity`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Mapping

from ackstore.rules import connectivity


def message_key(message_id: str | None, body: bytes, correlation_id: str | None) -> str:
    """The message's key within its connection: its AMQP ``message_id``, or — without one — a
    digest of its body and correlation id, so that a retransmitted copy maps to the same signal
    (A.3). Two different messages with neither a message id nor a correlation id and the same
    body are one message by this key (decisions #32)."""
    if message_id:
        return message_id
    return connectivity.digest_key([correlation_id or ""], body)


SHORT_STRING_BYTES = 255  # an AMQP 0.9.1 shortstr: message properties such as correlation-id
# The message properties that are shortstrs, as pika names them (AMQP 0.9.1, basic class).
SHORT_STRING_PROPERTIES = ("content_type", "content_encoding", "correlation_id", "reply_to", "expiration",
                           "message_id", "type", "user_id", "app_id", "cluster_id")


def correlation_id_property(value: object) -> str | None:
    """A correlation id as the AMQP ``correlation_id`` property, or ``None`` when it cannot be one
    (not text, or no shortstr): the message's own headers still carry it."""
    return value if isinstance(value, str) and short_string_problem(value) is None else None


def short_string_problem(value: object) -> str | None:
    """Why ``value`` cannot be a shortstr (a routing key, a property, a header's name), or None:
    text of at most 255 bytes of UTF-8."""
    if not isinstance(value, str):
        return "it is not text"
    if len(value) > SHORT_STRING_BYTES:  # characters are at most bytes: the cheap test first
        return f"it is more than {SHORT_STRING_BYTES} bytes"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "it holds a lone surrogate, which UTF-8 cannot"
    return f"it is {size} bytes, more than {SHORT_STRING_BYTES}" if size > SHORT_STRING_BYTES else None


def publish_problem(routing_key: object, properties: Mapping[str, Any]) -> str | None:
    """Why AMQP 0.9.1 cannot carry a publish with this routing key and these message properties
    (as pika names them; None ones are absent), or None — the one rule of what an answer or a
    target's message may be: the routing key and the shortstr properties at most 255 bytes of
    UTF-8, ``headers`` a field table pika can encode (:func:`table_problem`)."""
    problem = short_string_problem(routing_key)
    if problem:
        return f"the routing key: {problem}"
    for name, value in properties.items():
        if value is None:
            continue
        if name in SHORT_STRING_PROPERTIES:
            problem = short_string_problem(value)
        elif name == "headers":
            problem = table_problem(value)
        else:
            continue  # delivery_mode, priority, timestamp: numbers ackstore sets itself
        if problem:
            return f"the property {name}: {problem}"
    return None


def table_problem(table: object) -> str | None:
    """Why ``table`` cannot be an AMQP field table as pika 1.x encodes one, or None: names are
    shortstrs; values text, bytes, booleans, 64-bit integers, decimals of a 32-bit unscaled
    value, times from 1970 on, tables, lists or None (pika encodes no float)."""
    if not isinstance(table, Mapping):
        return "it is not a table"
    for name, value in table.items():
        problem = short_string_problem(name)
        if problem:
            return f"a name in it: {problem}"
        problem = _field_problem(value)
        if problem:
            return problem
    return None


def _field_problem(value: object) -> str | None:
    if value is None or isinstance(value, (bool, bytes)):
        return None
    if isinstance(value, str):
        return None if _is_utf8(value) else "it holds a lone surrogate, which UTF-8 cannot"
    if isinstance(value, int):
        return None if -2**63 <= value < 2**63 else "an integer past 64 bits"
    if isinstance(value, Decimal):
        return None if _is_decimal(value) else "a decimal past AMQP's (32 bits unscaled, 255 places)"
    if isinstance(value, datetime):
        return None if (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp() >= 0 \
            else "a time before 1970"
    if isinstance(value, Mapping):
        return table_problem(value)
    if isinstance(value, list):
        return next(filter(None, map(_field_problem, value)), None)
    return f"a {type(value).__name__}, which pika cannot encode"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_decimal(value: Decimal) -> bool:
    """A decimal as pika writes it: its normal form's places (at most 255) and unscaled value (32 bits)."""
    if not value.is_finite():
        return False
    normal = value.normalize()
    exponent = normal.as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    places = max(0, -exponent)
    if places > 255 or normal.adjusted() >= 10:  # ten digits before the point are past 32 bits (never computed)
        return False
    return -2**31 <= int(normal.scaleb(places)) < 2**31
