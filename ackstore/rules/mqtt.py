"""What an MQTT connection does with a message, as pure rules (B.9's MQTT row, decisions #99).

* :func:`broker_address` reads an ``mqtt://``, ``mqtts://``, ``tcp://`` or ``ssl://`` URL.
* :func:`inbound` maps MQTT 5 properties to Ditto headers; MQTT 3.1.1 has none (the Ditto
  Protocol envelope carries its headers).
* :func:`message_key` keys a message for de-duplication: a packet id is reused, so it is not one.
* :func:`disposition` is how MQTT carries out a settlement decision: PUBACK, or — only with
  ``reconnectForRedelivery`` — no PUBACK and a reconnect, so that the broker sends it again.
* :func:`outbound` maps a Ditto message's headers to MQTT 5 properties (targets, replies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlsplit

from ackstore.rules import connectivity, errors
from ackstore.rules.connectivity import CONTENT_TYPE, MESSAGE_ID, REPLY_TO, Disposition
from ackstore.rules.headers import CORRELATION_ID
from ackstore.rules.settlement import Settlement

TLS_SCHEMES = ("mqtts", "ssl")
PLAIN_SCHEMES = ("mqtt", "tcp")
ACK_TOKEN = "ack-token"
PUBACK = Disposition(ack=True)
WITHHELD = Disposition(ack=False, requeue=True)  # no PUBACK: the broker sends it again after a reconnect


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
            f"The URL <{errors.shown(_without_credentials(url))}> is not mqtt://, mqtts://, tcp:// or ssl://HOST[:PORT].")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise errors.connection_config_invalid("An MQTT URL has no path, query or fragment: give mqtt://HOST:PORT.")
    tls = parts.scheme in TLS_SCHEMES
    return BrokerAddress(parts.hostname, port or (8883 if tls else 1883), tls,
                         unquote(parts.username) if parts.username is not None else None,
                         unquote(parts.password) if parts.password is not None else None)


def _without_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url.rpartition("@")[2]


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
    """Whether a sender-chosen reply-to can be published to: a non-empty MQTT topic name of at
    most 65535 bytes, without wildcards or NUL (paho refuses the others; Mosquitto disconnects)."""
    return (isinstance(topic, str) and bool(topic) and not any(c in topic for c in "+#\x00")
            and len(topic.encode("utf-8", "surrogatepass")) <= 65535)


def disposition(decision: str, reconnect_for_redelivery: bool) -> Disposition:
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
