"""What an AMQP 1.0 connection does with a message, as pure rules (B.9's AMQP 1.0 row, decisions #112).

* :func:`outcome` is how AMQP 1.0 carries out a settlement decision: ``accepted``; ``rejected``
  (a failure not to be redelivered, PR #907); ``modified`` with delivery-failed (Ditto's
  redelivery), or ``released`` on a broker that does not implement ``modified`` (RabbitMQ 3.x
  ends the session on it: docs/stack-notes.md). A delivery given back undecided is ``released``:
  it was never tried, so it is not counted as a failed delivery.
* :func:`message_key` keys a message for de-duplication: its ``message-id`` on its source address.
* :func:`properties`, :func:`body` and :func:`application_properties` read what the connector
  needs of a received message; a body or a property nesting past the door's bound (decisions
  #115) is 400 json.invalid before anything reads it further, and :func:`unreadable` is the
  answer to a message proton itself could not read (decisions #131).
* :func:`target_node` reads a target's address (``name``, ``queue://name``, ``topic://name``).
* :func:`reply_address_problem` says why a sender's ``reply-to`` is no address to attach a link
  to: RabbitMQ 3's plugin ends the whole session on a refused attach, and aborts the connection
  on some (decisions #119).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ackstore.rules import connectivity, errors
from ackstore.rules.connectivity import Settling
from ackstore.rules.index_rows import escape_key
from ackstore.rules.limits import MAX_JSON_DEPTH

ACCEPTED, REJECTED, MODIFIED, RELEASED = "accepted", "rejected", "modified", "released"
REDELIVERY_OUTCOMES = (MODIFIED, RELEASED)  # how a connection may carry out "redeliver"
QUEUE_PREFIX, TOPIC_PREFIX = "queue://", "topic://"
# The target addresses RabbitMQ 3.10's AMQP 1.0 plugin attaches a link to and routes a message
# without a subject by (measured, docs/stack-notes.md): a queue it declares, an existing queue, a
# queue of direct reply-to, a topic's routing key, an exchange with a routing key, a bare queue
# name. Any other ("/", "/queue/", "/exchange/x" without a key, "/temp-queue/x", "a/b") it refuses
# by ending the session, or — "/temp-queue/x", an empty routing key on a topic exchange — worse.
_REPLY_ADDRESS = re.compile(r"/(?:queue|amq/queue|reply-queue|topic)/[^/]+|/exchange/[^/]+/[^/]+|[^/]+")


def outcome(disposition: Settling, redelivery: str = MODIFIED) -> str:
    """The outcome a delivery is settled with (B.9's AMQP 1.0 row)."""
    if disposition.ack:
        return ACCEPTED
    if not disposition.requeue:
        return REJECTED
    return RELEASED if disposition.given_back else redelivery


def identifier_text(value: object) -> str | None:
    """A ``message-id`` or ``correlation-id`` (string, ulong, uuid or binary) as text: a binary
    one's bytes that are no UTF-8, and its 0x00 bytes (a binary id is any bytes: a raw UUID often
    holds one; text cannot), written as ``\\xff`` and ``\\x00``."""
    if value is None or value == "":
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace").replace("\x00", "\\x00")
    return str(value)  # a string (or symbol), a ulong, a uuid


def message_key(address: str, message_id: object, body: bytes, correlation_id: str | None) -> str:
    """A message's key within its connection: its ``message-id`` on the source address it came
    from (one id names a message only there), or a digest of the address, correlation id and
    body. A copy the broker delivers again is the same message, so it maps to the same signal."""
    text = identifier_text(message_id)
    if text:
        return f"{text}@{address}"
    return connectivity.digest_key([address, correlation_id or ""], body)


def properties(message: Any) -> dict[str, str | None]:
    """The message's properties the connector maps to Ditto headers, as AMQP 0.9.1 names them."""
    return {"correlation_id": identifier_text(message.correlation_id), "reply_to": _text(message.reply_to),
            "content_type": _text(message.content_type), "message_id": identifier_text(message.id)}


def _text(value: object) -> str | None:
    """A property as plain text (proton hands a ``content-type`` over as a symbol, a ``str`` subclass)."""
    return str(value) if value else None


def body(value: object) -> bytes:
    """A received body as bytes: an ``amqp-value`` string as UTF-8, a ``data`` section as it is.
    Any other AMQP value (a map, a list, a number) is no Ditto Protocol text; its Python text is
    handed on, and the ledger answers it as it answers any body that is no JSON object — unless
    it nests past MAX_JSON_DEPTH levels, which is 400 json.invalid before its text is written
    (``repr`` nests on Python's stack)."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if not nests_within(value, MAX_JSON_DEPTH):
        raise errors.json_too_deep(MAX_JSON_DEPTH, None)
    return repr(value).encode("utf-8", "backslashreplace")


def application_properties(values: Mapping[Any, Any] | None) -> dict[str, Any]:
    """Application properties as Ditto headers' JSON values (the AMQP header mapping, decisions #39).
    A property is a header, the message's third level: one nesting past the door's bound there
    (any compound AMQP value, described ones too) is 400 json.invalid naming it, before it is read."""
    headers: dict[str, Any] = {}
    for name, value in (values or {}).items():
        at = f"/headers/{escape_key(str(name))}"
        if not nests_within(value, MAX_JSON_DEPTH - at.count("/")):
            raise errors.json_too_deep(MAX_JSON_DEPTH, at)
        headers[str(name)] = connectivity.header_json(value, at)
    return headers


def unreadable(problem: BaseException) -> errors.DittoError:
    """The answer to a message proton could not read: one nesting past its decoder's stack (it
    reads values recursively) nests past the door's bound too; anything else is no AMQP 1.0 the
    connector can read."""
    if isinstance(problem, RecursionError):
        return errors.json_too_deep(MAX_JSON_DEPTH, None)
    return errors.json_invalid(f"The AMQP 1.0 message cannot be read ({type(problem).__name__}).")


def nests_within(value: object, levels: int) -> bool:
    """Whether compound AMQP values nest at most ``levels`` deep in ``value`` (a scalar is 0), read
    a level at a time and never past ``levels + 1``: no recursion, whatever the depth."""
    level = [value]
    for _ in range(levels + 1):
        compound = [item for item in level if _is_compound(item)]
        if not compound:
            return True
        level = [member for item in compound for member in _members(item)]
    return False


def _is_compound(value: object) -> bool:
    return isinstance(value, (Mapping, list, tuple)) or _described_parts(value) is not None


def _members(value: object) -> list[Any]:
    """What a compound AMQP value holds, as proton hands it over — a map's keys and values (a key
    may be compound too), a list's or an array's elements, a described value's descriptor and
    value — or nothing."""
    if isinstance(value, Mapping):
        return [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple)):
        return list(value)
    return _described_parts(value) or []


def _described_parts(value: object) -> list[Any] | None:
    """proton's ``Array`` (a descriptor and elements) and ``Described`` (a descriptor and a value),
    known by their fields: the rules import no client library."""
    if hasattr(value, "descriptor") and hasattr(value, "elements"):
        return [value.descriptor, *value.elements]
    if hasattr(value, "descriptor") and hasattr(value, "value"):
        return [value.descriptor, value.value]
    return None


def target_node(address: str) -> tuple[str, str | None]:
    """A target's address as its node's address and capability: ``queue://q`` is ``q`` (a
    queue), ``topic://t`` is ``t`` with the ``topic`` capability, any other address as it is."""
    if address.startswith(QUEUE_PREFIX):
        return address[len(QUEUE_PREFIX):], "queue"
    if address.startswith(TOPIC_PREFIX):
        return address[len(TOPIC_PREFIX):], "topic"
    return address, None


def reply_address_problem(address: str) -> str | None:
    """Why a message's answers cannot go to ``address`` (its node's, :func:`target_node`), or None:
    an address of the forms RabbitMQ's AMQP 1.0 plugin attaches — ``/queue/Q``, ``/amq/queue/Q``,
    ``/reply-queue/Q``, ``/topic/KEY``, ``/exchange/X/KEY``, a bare queue name ``Q`` — of UTF-8 text
    without U+0000."""
    node, _ = target_node(address)
    try:
        node.encode("utf-8")
    except UnicodeEncodeError:
        return "its reply-to address holds text no UTF-8 can"
    if "\x00" in node:
        return "its reply-to address holds U+0000"
    if not _REPLY_ADDRESS.fullmatch(node):
        return ("its reply-to address is none of /queue/Q, /amq/queue/Q, /reply-queue/Q, /topic/KEY, "
                "/exchange/X/KEY or a queue's name")
    return None
