"""What an MQTT connection does with a message, as pure rules (B.9's MQTT row, decisions #99).

* :func:`broker_address` reads an ``mqtt://``, ``mqtts://``, ``tcp://`` or ``ssl://`` URL.
* :func:`inbound` maps MQTT 5 properties to Ditto headers; MQTT 3.1.1 has none (the Ditto
  Protocol envelope carries its headers).
* :func:`message_key` keys a message for de-duplication: a packet id is reused, so it is not one.
* :func:`disposition` is how MQTT carries out a settlement decision: PUBACK, or — only with
  ``reconnectForRedelivery`` — no PUBACK and a reconnect, so that the broker sends it again.
* :func:`outbound` maps a Ditto message's headers to MQTT 5 properties (targets, replies);
  :func:`property_values` gives them as paho names them.
* :func:`publish_problem` is what an MQTT PUBLISH can carry (topic name, MQTT 5 property limits,
  the broker's Maximum Packet Size): what it refuses is dropped, never sent (issue 37).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import unquote, urlsplit

from ackstore.rules import connectivity, credentials, errors
from ackstore.rules.connectivity import CONTENT_TYPE, MESSAGE_ID, REPLY_TO, Settling
from ackstore.rules.headers import CORRELATION_ID
from ackstore.rules.settlement import Settlement
from ackstore.rules.wire import DITTO_CONTENT_TYPE

TLS_SCHEMES = ("mqtts", "ssl")
PLAIN_SCHEMES = ("mqtt", "tcp")
ACK_TOKEN = "ack-token"
PUBACK = Settling(ack=True)
WITHHELD = Settling(ack=False, requeue=True)  # no PUBACK: the broker sends it again after a reconnect


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = None


def broker_address(url: str) -> BrokerAddress:
    """The broker an MQTT URL names; 400 ``connectivity:connection.configuration.invalid``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as problem:
        raise errors.connection_config_invalid(f"The MQTT URL is malformed: {problem}.") from None
    if parts.scheme not in (*TLS_SCHEMES, *PLAIN_SCHEMES) or not parts.hostname:
        raise errors.connection_config_invalid(
            f"The URL <{errors.shown(credentials.masked(url))}> is not mqtt://, mqtts://, tcp:// or ssl://HOST[:PORT].")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise errors.connection_config_invalid("An MQTT URL has no path, query or fragment: give mqtt://HOST:PORT.")
    tls = parts.scheme in TLS_SCHEMES
    return BrokerAddress(parts.hostname, port or (8883 if tls else 1883), tls,
                         unquote(parts.username) if parts.username is not None else None,
                         unquote(parts.password) if parts.password is not None else None)


def inbound(user_properties: Iterable[tuple[str, str]] | None, content_type: str | None,
            correlation_data: bytes | None, response_topic: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """MQTT 5 properties as (headers, properties): user properties become headers (names in lower
    case, the first of a repeated name wins); correlation data, response topic and content type
    become ``correlation-id``, ``reply-to`` and ``content-type``. The envelope's own headers win
    over all of them (:func:`ackstore.rules.connectivity.inbound_envelope`)."""
    headers: dict[str, Any] = {}
    for name, value in user_properties or ():
        headers.setdefault(str(name).lower(), str(value).replace("\x00", "\ufffd"))
    correlation = bytes(correlation_data).decode("utf-8", "replace").replace("\x00", "\ufffd") \
        if correlation_data else None
    message_id = headers.get(MESSAGE_ID)
    return headers, {"correlation_id": correlation, "reply_to": response_topic or None,
                     "content_type": content_type or None, "message_id": message_id or None}


def message_key(topic: str, message_id: str | None, correlation_id: str | None, payload: bytes) -> str:
    """A message's key within its connection (decisions #99): its topic with its ``message-id``
    user property, or a digest of its topic, correlation data and payload. A copy the broker sends
    again (DUP, or after a reconnect) is byte for byte the same, on the same topic, so it maps to
    the same signal; a packet id is reused by the next message once PUBACKed, so it cannot be part
    of the key; devices on one wildcard subscription may count their message ids alike, so an id
    names a message only on its topic."""
    if message_id:
        return f"{message_id}@{topic}"
    return connectivity.digest_key([topic, correlation_id or ""], payload)


def is_topic_name(topic: object) -> bool:
    """Whether a sender-chosen reply-to can be published to (:func:`topic_name_problem`)."""
    return topic_name_problem(topic) is None


# --- what a PUBLISH can carry (MQTT 3.1.1 and 5) ----------------------------------------------

MAX_STRING_BYTES = 65_535  # a UTF-8 string or binary data: its length is two bytes (MQTT 5, 1.5.4, 1.5.6)
MAX_REMAINING_LENGTH = 268_435_455  # a variable byte integer's largest value (MQTT 5, 1.5.5)
# What a UTF-8 string must not hold (MQTT 5, 1.5.4): U+0000; control characters and
# non-characters, which a receiver may refuse by closing the connection (Mosquitto does); and
# lone surrogates, which are no UTF-8 at all.
_NONCHARACTERS = "".join(re.escape(chr(plane + end)) for plane in range(0, 0x110000, 0x10000)
                         for end in (0xFFFE, 0xFFFF))
_UNSENDABLE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\ud800-\\udfff\\ufdd0-\\ufdef{_NONCHARACTERS}]")


def string_problem(text: object) -> str | None:
    """Why ``text`` cannot be an MQTT UTF-8 string (a topic, a content type, a user property), or None."""
    if not isinstance(text, str):
        return "it is not text"
    if len(text) > MAX_STRING_BYTES:  # characters are at most bytes: the cheap test first
        return f"it is more than {MAX_STRING_BYTES:,} bytes"
    found = _UNSENDABLE.search(text)
    if found:
        return f"it holds U+{ord(found.group()):04X}, which an MQTT string must not"
    size = len(text.encode("utf-8"))
    return f"it is {size:,} bytes, more than {MAX_STRING_BYTES:,}" if size > MAX_STRING_BYTES else None


def topic_name_problem(topic: object) -> str | None:
    """Why ``topic`` cannot be published to (a sender's reply-to, a target's address), or None:
    a topic name is a non-empty string without wildcards (MQTT 5, 4.7.3; paho refuses the others,
    Mosquitto closes the connection of a client that sends them)."""
    if not isinstance(topic, str) or not topic:
        return "it is no topic name"
    if "+" in topic or "#" in topic:
        return "it holds a wildcard (+ or #)"
    return string_problem(topic)


def _binary_problem(data: object) -> str | None:
    if not isinstance(data, (bytes, bytearray)):
        return "it is not bytes"
    return f"it is {len(data):,} bytes, more than {MAX_STRING_BYTES:,}" if len(data) > MAX_STRING_BYTES else None


def _pairs_problem(pairs: object) -> str | None:
    if not isinstance(pairs, (list, tuple)):
        return "it is not a list of pairs"
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            return "it is not a list of pairs"
        problem = string_problem(pair[0]) or string_problem(pair[1])
        if problem:
            return problem
    return None


def _string_size(text: str) -> int:
    return 1 + 2 + len(text.encode("utf-8"))  # its identifier byte, its length, its UTF-8


def _pairs_size(pairs: list[tuple[str, str]]) -> int:
    return sum(1 + 2 + len(k.encode("utf-8")) + 2 + len(v.encode("utf-8")) for k, v in pairs)  # one property each


# The PUBLISH properties a Ditto message maps to, as paho names them: how each is checked, and
# how many bytes it takes in the packet once checked (MQTT 5, 2.2.2.2).
PUBLISH_PROPERTIES: dict[str, tuple[Callable[[Any], str | None], Callable[[Any], int]]] = {
    "ContentType": (string_problem, _string_size),
    "ResponseTopic": (topic_name_problem, _string_size),
    "CorrelationData": (_binary_problem, lambda data: 1 + 2 + len(data)),
    "UserProperty": (_pairs_problem, _pairs_size),
}


def _variable_byte_size(value: int) -> int:
    return 1 if value < 128 else 2 if value < 16_384 else 3 if value < 2_097_152 else 4


def packet_size(topic: str, payload_bytes: int, properties: Mapping[str, Any] | None, *, qos: int) -> int:
    """The bytes of a PUBLISH packet; ``properties`` (checked) is None on MQTT 3.1.1."""
    remaining = 2 + len(topic.encode("utf-8")) + (2 if qos else 0) + payload_bytes
    if properties is not None:
        length = sum(PUBLISH_PROPERTIES[name][1](value) for name, value in properties.items())
        remaining += _variable_byte_size(length) + length
    return 1 + _variable_byte_size(remaining) + remaining


def publish_problem(topic: object, payload_bytes: int, properties: Mapping[str, Any] | None, *, qos: int,
                    maximum_packet_size: int | None = None) -> str | None:
    """Why MQTT cannot carry a PUBLISH to ``topic`` with a payload of ``payload_bytes`` and these
    MQTT 5 properties (:func:`property_values`; None on 3.1.1), or None — the one rule of what an
    answer or a target's message may be: a topic name, each property within its type's limits
    (strings and binary data at most 65 535 bytes), and the whole packet within the broker's
    Maximum Packet Size (MQTT 5's CONNACK says it; else the protocol's own bound)."""
    problem = topic_name_problem(topic)
    if problem:
        return f"the topic: {problem}"
    for name, value in (properties or {}).items():
        problem = PUBLISH_PROPERTIES[name][0](value)
        if problem:
            return f"the property {name}: {problem}"
    assert isinstance(topic, str)
    size = packet_size(topic, payload_bytes, properties, qos=qos)
    if size > 5 + MAX_REMAINING_LENGTH:
        return f"the packet would be {size:,} bytes, more than MQTT's {5 + MAX_REMAINING_LENGTH:,}"
    if maximum_packet_size is not None and size > maximum_packet_size:
        return f"the packet would be {size:,} bytes, more than the broker's Maximum Packet Size of " \
               f"{maximum_packet_size:,}"
    return None


def disposition(decision: str, reconnect_for_redelivery: bool) -> Settling:
    """B.9's MQTT row: ack, reject and dead-letter are a PUBACK (MQTT has no nack; what was
    decided is in the ledger); redeliver withholds the PUBACK when the connection reconnects
    for redelivery, and is a PUBACK otherwise (Ditto's default, recorded as carried out so)."""
    if Settlement(decision) is Settlement.REDELIVER and reconnect_for_redelivery:
        return WITHHELD
    return PUBACK


def carried_out_as(decision: str, reconnect_for_redelivery: bool) -> str | None:
    """The settlement MQTT performed instead of ``decision``, when it could not perform it:
    a redeliver decision without ``reconnectForRedelivery`` is acknowledged (a PUBACK)."""
    if Settlement(decision) is Settlement.REDELIVER and not reconnect_for_redelivery:
        return Settlement.ACK.value
    return None


def outbound(headers: Mapping[str, Any]) -> dict[str, Any]:
    """MQTT 5 properties for a published Ditto message (a target's signal, an answer): its
    correlation id as correlation data, its reply-to as response topic, its ack-token as a user
    property; the envelope itself carries every header."""
    correlation = headers.get(CORRELATION_ID)
    reply_to = headers.get(REPLY_TO)
    token = headers.get(ACK_TOKEN)
    return {
        "content_type": str(headers.get(CONTENT_TYPE) or ""),
        "correlation_data": correlation.encode("utf-8", "surrogatepass") if isinstance(correlation, str) else None,
        "response_topic": reply_to if isinstance(reply_to, str) and reply_to else None,
        "user_properties": [(ACK_TOKEN, token)] if isinstance(token, str) else [],
    }


def property_values(headers: Mapping[str, Any], message_id: str | None = None) -> dict[str, Any]:
    """The MQTT 5 properties of a published Ditto message as paho names them: :func:`outbound`'s,
    the Ditto content type when the headers name none, and a ``message-id`` user property when given."""
    mapped = outbound(headers)
    values: dict[str, Any] = {"ContentType": mapped["content_type"] or DITTO_CONTENT_TYPE}
    if mapped["correlation_data"] is not None:
        values["CorrelationData"] = mapped["correlation_data"]
    if mapped["response_topic"] is not None:
        values["ResponseTopic"] = mapped["response_topic"]
    user_properties = mapped["user_properties"] + ([("message-id", message_id)] if message_id else [])
    if user_properties:
        values["UserProperty"] = user_properties
    return values
