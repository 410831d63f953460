"""What a broker connection does with a consumed message, as pure rules shared by every
transport (B.7, B.9, A.2.2, A.3); what one protocol alone needs is its own module
(:mod:`ackstore.rules.amqp`, :mod:`ackstore.rules.amqp10`, :mod:`ackstore.rules.mqtt`,
:mod:`ackstore.rules.http_push`).

* :func:`inbound_envelope` maps a consumed message (body, headers, properties) to the
  Ditto Protocol envelope the ledger stores, with the source's ``requested-acks`` added;
  :func:`header_json` is a transport's header value as JSON.
* :func:`digest_key` keys a message without an id of its own for de-duplication (A.3).
* :func:`settling` is how a connection settles a delivery for a settlement decision (B.9):
  a :class:`Settling`, which each transport carries out as its protocol can.
* :func:`issued_ack_status` is the status of a target-issued ack from the broker's answer.
* :func:`consumer_timeout_warning` checks A.2.2's bound against the broker's consumer timeout.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Mapping, Sequence

from ackstore.rules import envelopes, errors
from ackstore.rules.headers import CORRELATION_ID, REQUESTED_ACKS, requested_acks_text_items
from ackstore.rules.index_rows import escape_key
from ackstore.rules.limits import MAX_JSON_DEPTH
from ackstore.rules.settlement import Settlement

REPLY_TO = "reply-to"
CONTENT_TYPE = "content-type"
MESSAGE_ID = "message-id"
# AMQP properties that become Ditto headers when the envelope does not carry them itself.
PROPERTY_HEADERS = (("correlation_id", CORRELATION_ID), ("reply_to", REPLY_TO),
                    ("content_type", CONTENT_TYPE), ("message_id", MESSAGE_ID))


def digest_key(parts: Sequence[str], body: bytes) -> str:
    """A message's key from what identifies it: its ``parts`` (each length-prefixed, so that no
    two splits collide) and its body."""
    digest = hashlib.sha256()
    for part in parts:
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
    digest.update(body)
    return f"sha256:{digest.hexdigest()}"


def inbound_envelope(
    body: bytes,
    amqp_headers: Mapping[str, Any] | None,
    properties: Mapping[str, Any],
    *,
    includes: Sequence[str] = (),
    max_bytes: int,
) -> dict[str, Any] | bytes:
    """The envelope to store for a consumed message.

    The body's own Ditto headers win; the AMQP headers table and the properties
    (``correlation_id``, ``reply_to``, ``content_type``, ``message_id``) fill in what it lacks.
    The source's ``includes`` are added to ``requested-acks`` (Ditto's
    ``acknowledgementRequests.includes``); an explicit empty list in the message wins (B.7).
    A body that is too large or no JSON object is returned as it is: the ledger answers it
    with the same error as any other submission. The body's depth is checked as it is read, so
    the envelope is a ``CheckedMessage`` the ledger does not walk again, unless a header this
    adds holds objects or arrays (an AMQP field table or array): then it is checked as stored.
    A header nesting past the door's bound is 400 json.invalid here (:func:`header_json`),
    before a level past it is read.
    """
    if len(body) > max_bytes:
        return body
    try:
        envelope, body_bound = envelopes.read_text(body, max_bytes)  # msgspec's fast path for a plain body
    except errors.DittoError:
        return body
    if not isinstance(envelope, dict) or not isinstance(envelope.get("headers", {}), dict):
        return body
    body_headers = envelope.get("headers", {})
    headers = {str(name).lower(): value for name, value in body_headers.items()}
    added: dict[str, Any] = {}  # what this adds to (or changes in) the body's headers
    nested = False  # whether a header added here may nest: the body's depth does not bound it
    for name, value in (amqp_headers or {}).items():
        key = str(name).lower()
        if key in headers:
            continue  # the body's own header wins: the one it shadows is not read
        headers[key] = added[key] = header_json(value, f"/headers/{escape_key(key)}")
        nested = nested or isinstance(value, (Mapping, list, tuple))
    for prop, name in PROPERTY_HEADERS:
        if properties.get(prop) and name not in headers:
            headers[name] = added[name] = properties[prop]
    with_includes = requested_with_includes(headers.get(REQUESTED_ACKS), includes)
    if with_includes is not None:
        headers[REQUESTED_ACKS] = added[REQUESTED_ACKS] = with_includes  # the body's labels, then labels: no level added
    if nested:
        return {**envelope, "headers": headers}
    checked = envelopes.CheckedMessage(envelope)
    checked["headers"] = headers
    checked.size_bound = _size_bound(body_bound, body_headers, added)
    return checked


_HEADERS_MEMBER = len(',"headers":')  # what giving a body without headers its headers adds


def _size_bound(body_bound: int | None, body_headers: Mapping[str, Any], added: Mapping[str, Any]) -> int | None:
    """A bound of the merged envelope's JSON text (``envelopes.CheckedMessage.size_bound``), so
    that the ledger need not encode it again to measure it: the body's bound (the fast path read
    it), plus a bound of what was added, plus the member that holds them. None when it is not
    known: a body the full parse read, a header name lowering may lengthen (not ASCII), or an
    added value the bound is not sure of — the ledger's full measure answers those, with its exact words."""
    if body_bound is None or not all(name.isascii() for name in body_headers):
        return None
    added_bound = envelopes.canonical_size_bound(added)
    return None if added_bound is None else body_bound + added_bound + _HEADERS_MEMBER


class Unread:
    """A transport's value its client library could not read for its nesting (pika reads a
    header table on Python's stack): nested past every bound, so refused as too deep."""

    def __repr__(self) -> str:
        return "<a value nested past its reader's stack>"


UNREAD = Unread()


def header_json(value: Any, at: str = "") -> Any:
    """A header value as JSON, as a transport's client library delivers it (decisions #39: the
    AMQP header mapping; AMQP 1.0's application properties too): every type pika delivers maps,
    none is a reason to reject a message (RabbitMQ's own ``x-death`` holds timestamps).

    | AMQP field type               | JSON                                               |
    | integer, boolean, void        | as it is                                           |
    | string                        | as it is, but U+0000 (which jsonb cannot hold) as U+FFFD |
    | float                         | the number; NaN and infinities become ``null``     |
    | byte array (bytes)            | UTF-8 text, undecodable bytes and NUL as U+FFFD    |
    | timestamp (datetime)          | ISO 8601 text, UTC when the value has no zone      |
    | decimal                       | the number (an integer when whole); not finite: ``null`` |
    | field table, field array      | an object (keys as text) / an array, mapped alike  |
    | anything else                 | its text (``str``)                                 |

    ``at`` is the value's place in the message (a header's is ``/headers/NAME``, its third
    level). A table or array nesting past MAX_JSON_DEPTH levels there, the message the first
    (the door's bound, decisions #115), is 400 json.invalid naming it, as the door names it,
    before any level past it is read; so is a value pika could not read (:data:`UNREAD`). So
    no sender's nesting decides how deep this reads.
    """
    return _header_json(value, at, MAX_JSON_DEPTH - at.count("/"))


def _header_json(value: Any, at: str, levels: int) -> Any:
    """:func:`header_json` of a value at ``at``, where ``levels`` more levels may nest."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)  # pika's 64-bit "long" is an int subclass JSON encoders may not know
    if isinstance(value, str):
        return str(value).replace("\x00", "\ufffd")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace").replace("\x00", "\ufffd")
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    if isinstance(value, Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Unread) or (levels <= 0 and isinstance(value, (Mapping, list, tuple))):
        raise errors.json_too_deep(MAX_JSON_DEPTH, at or "/")
    if isinstance(value, Mapping):
        return {_header_json(str(key), at, levels): _header_json(member, f"{at}/{escape_key(str(key))}", levels - 1)
                for key, member in value.items()}
    if isinstance(value, (list, tuple)):
        return [_header_json(member, f"{at}/{index}", levels - 1) for index, member in enumerate(value)]
    return str(value)



def requested_with_includes(requested: object, includes: Sequence[str]) -> object:
    """``requested-acks`` after a source added ``includes`` (B.7, Ditto's
    ``appendConnectionAcknowledgementsToSignal``); ``None`` leaves the header absent.

    | message's requested-acks     | result                                  |
    | absent                       | the includes (absent if there are none) |
    | explicit empty (``[]``/"")   | empty: the message's choice wins        |
    | labels                       | the labels, then the includes not there |
    | not a list or text           | unchanged: validation answers it        |
    """
    if not includes:
        return requested
    if requested is None:
        return list(includes)
    if isinstance(requested, str):
        try:
            present = requested_acks_text_items(requested)
        except errors.DittoError:
            return requested  # validation answers it
    elif isinstance(requested, list):
        present = requested
    else:
        return requested
    if not present:
        return requested  # an explicit empty list wins
    return present + [label for label in includes if label not in present]


@dataclass(frozen=True)
class Settling:
    """How a delivery is settled with its broker (B.9): acknowledged, or not, with requeue or
    without (AMQP 0.9.1's ``basic.ack`` / ``basic.nack``); ``given_back`` marks one returned
    undecided, never tried (AMQP 1.0 releases it rather than counting a failed delivery). Not
    an ack's disposition in the ledger (:class:`ackstore.rules.acks.Disposition`)."""

    ack: bool
    requeue: bool = False
    given_back: bool = False


def settling(decision: str) -> Settling:
    """B.9's AMQP rows: ack → ack; reject and dead-letter → not acknowledged, without requeue;
    redeliver → not acknowledged, with requeue. AMQP 0.9.1 carries it out as ``basic.ack`` /
    ``basic.nack``, AMQP 1.0 as an outcome (:func:`ackstore.rules.amqp10.outcome`)."""
    settled = Settlement(decision)
    if settled is Settlement.ACK:
        return Settling(ack=True)
    return Settling(ack=False, requeue=settled is Settlement.REDELIVER)


CLIENT_ERROR = Settling(ack=False, requeue=False)  # a rejected message must not come back


def issued_ack_status(confirmed: bool | None) -> int:
    """A target-issued ack from the broker's answer to a publish (B.9, AMQP 0.9.1): 200 on a
    confirm, 503 on a nack, 400 when the channel has no publisher confirms (``None``)."""
    if confirmed is None:
        return 400
    return 200 if confirmed else 503


DEFAULT_CONSUMER_TIMEOUT_MS = 30 * 60_000  # RabbitMQ's default


def consumer_timeout_warning(max_timeout_ms: int, interval_ms: int, consumer_timeout_ms: int) -> str | None:
    """A.2.2: a held delivery must be decided well before the broker gives up on it. Warn when
    the maximum timeout plus two DAG intervals (the run that decides, the run that settles)
    leaves less than a fifth of the consumer timeout as margin."""
    needed = max_timeout_ms + 2 * interval_ms
    if needed * 5 <= consumer_timeout_ms * 4:
        return None
    return (
        f"the maximum timeout ({max_timeout_ms} ms) plus two pipeline intervals ({interval_ms} ms each) "
        f"is not comfortably below the broker's consumer timeout ({consumer_timeout_ms} ms): a delivery "
        "held that long may be closed and redelivered by the broker before it is settled"
    )


def is_acknowledgement(envelope: object) -> bool:
    """Whether a consumed envelope is an acknowledgement rather than a signal (a connection's
    source, or a door, may carry its subscribers' acks): its topic read once
    (:attr:`ackstore.rules.envelopes.Topic.is_acknowledgement`, the rule's one place)."""
    topic = envelopes.topic_of(envelope)
    return topic is not None and topic.is_acknowledgement
