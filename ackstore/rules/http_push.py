"""What an HTTP push target does with a signal and its endpoint's response, as pure rules (B.9's
HTTP push row, Ditto's ``HttpPublisherActor``, decisions #113).

* :func:`parse_endpoint` reads the connection's ``uri`` and :func:`parse_address` a target's
  ``VERB:/path``: what HTTP cannot send (a port past 65 535, a malformed host, a path that is not
  printable ASCII) is refused when the connection is read, never when a request is made.
* :func:`header_problem` says why a header value cannot be sent (a sender's correlation id holding
  CR LF or a character past ASCII): such a message is refused, its label 400 (decisions #118).
* :func:`issued_status` is the target's label from what happened to the request: the response's
  status (2xx, 4xx, 5xx alike); no answer within the timeout, 408; the request failing (refused,
  reset), 500 (Ditto's ``DefaultExceptionToAcknowledgementConverter``: a generic publish failure);
  a status HTTP defines no final meaning for (101, 600-999), 503 with Ditto's
  ``message.sending.failed`` as the value (:func:`unknown_status_error`).
* :func:`ack_value` is the ack's value from the response body: its JSON, else its text, else its
  bytes in base64 (Ditto's order).
* :func:`live_response` is the live response the endpoint's response is, for a target that issues
  ``live-response``: a message's response built from the status and body; a live command's, the
  body itself (a Ditto Protocol command response).
"""

from __future__ import annotations

import base64
import re
from typing import Any, Mapping, NamedTuple
from urllib.parse import unquote, urlsplit

from ackstore.rules import errors, jsontext, limits

METHODS = ("POST", "PUT", "PATCH", "GET", "DELETE")
WITHOUT_BODY = ("GET", "DELETE")  # Ditto's omitRequestBody default
TIMED_OUT = 408
FAILED = 500
UNKNOWN_STATUS = 503  # Ditto's MessageSendingFailedException: "Remote server delivered unknown HTTP status code"
FINAL_STATUSES = range(200, 600)  # 1xx are interim (RFC 9110 §15.2); past 599 HTTP defines none
MAX_BODY_BYTES = 100_000  # Ditto's issued-max-bytes: a larger response's value is not kept
# What a request line's path may hold: printable ASCII but the space (a "%" escape is its own text).
_PATH = re.compile(r"/[\x21-\x7e]*")
# What a header value may hold, as it is sent: visible ASCII, with spaces and tabs inside (RFC 9110
# §5.5's field-vchar without obs-text, whose bytes each receiver reads in a charset of its own).
_FIELD_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20\x09\x21-\x7e]*[\x21-\x7e])?)?")


class EndpointAddress(NamedTuple):
    """The connection's ``uri`` as requests use it."""

    https: bool
    host: str
    port: int
    base: str  # the path every target's path is appended to, without a trailing /
    username: str | None
    password: str | None


def parse_endpoint(uri: str) -> EndpointAddress:
    """An ``http://`` or ``https://`` URI (``user:password@`` for basic authentication) as the
    endpoint requests go to; ValueError saying why it cannot be one."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as problem:  # "Invalid IPv6 URL", "Port out of range 0-65535", a port that is no number
        raise ValueError(f"is no URL requests can be sent to ({problem})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("must start with http:// or https://")
    host = parts.hostname
    if not host or not host.isascii() or not host.isprintable() or " " in host:
        raise ValueError("needs a host of ASCII letters, digits, dots or an [IPv6] address (an international "
                         "name in its IDNA form, xn--…)")
    if port == 0:
        raise ValueError("needs a port from 1 to 65535")
    if parts.query or parts.fragment:
        raise ValueError("has a query or fragment: give the path only, a target's address adds its own")
    base = parts.path.rstrip("/")
    if base and not _PATH.fullmatch(base):
        raise ValueError("has a path that is not printable ASCII: percent-encode it (/%E2%98%83 for /☃)")
    https = parts.scheme == "https"
    return EndpointAddress(https, host, port or (443 if https else 80), base,
                           unquote(parts.username) if parts.username is not None else None,
                           unquote(parts.password or "") if parts.username is not None else None)


def parse_address(address: object) -> tuple[str, str]:
    """``VERB:/path`` (Ditto's HTTP push target address) as (method, path); ValueError saying why not."""
    if not isinstance(address, str) or ":" not in address:
        raise ValueError("must be VERB:/path, such as POST:/events")
    method, _, path = address.partition(":")
    if method not in METHODS:
        raise ValueError(f"names no HTTP method of {', '.join(METHODS)}")
    if not path.startswith("/") or "{{" in path:
        raise ValueError("needs a path that starts with / (no placeholders)")
    if not _PATH.fullmatch(path):
        raise ValueError("needs a path of printable ASCII without spaces: percent-encode the rest (/%E2%98%83 for /☃)")
    return method, path


def header_problem(name: str, value: str) -> str | None:
    """Why a request cannot carry ``value`` in its header ``name`` as it is, or None. A header is
    visible ASCII with spaces inside: CR and LF would end it (and start a header of the sender's
    choosing), a character past ASCII has no one encoding every receiver reads alike, and the
    spaces around a value are dropped by its receiver (it would read another correlation id)."""
    if _FIELD_VALUE.fullmatch(value):
        return None
    for character in value:
        if not " " <= character <= "~" and character != "\t":
            return f"its {name} header holds U+{ord(character):04X}, which an HTTP header cannot carry as it is"
    return f"its {name} header begins or ends with a space, which its receiver would drop"


def is_final(status: int) -> bool:
    """Whether ``status`` is a final response HTTP defines (200-599): what issues the label as it is."""
    return status in FINAL_STATUSES


def issued_status(status: int | None, timed_out: bool = False) -> int:
    """The target's label: the response's status; 408 when none came in time; 500 when the request
    failed; 503 for a status that is no final HTTP status (Ditto's ``HttpPublisherActor`` fails the
    send with ``MessageSendingFailedException``, whose status is 503)."""
    if status is not None:
        return status if is_final(status) else UNKNOWN_STATUS
    return TIMED_OUT if timed_out else FAILED


def unknown_status_error(status: int) -> dict[str, Any]:
    """The ack's value for a status that is no final HTTP status: Ditto's error without its status."""
    error = errors.message_sending_failed(f"Remote server delivered unknown HTTP status code <{status}>!").to_json()
    return {key: value for key, value in error.items() if key != "status"}


def ack_value(content_type: str | None, body: bytes) -> Any:
    """The ack's value from a response body: JSON when it is (whatever its content type says, as
    Ditto reads a JSON or Ditto content type), else UTF-8 text, else base64; None when empty or
    past :data:`MAX_BODY_BYTES`. JSON that nests too deep to be a message's value (decisions #115)
    is kept as its text: the ack that carries it must pass the door's depth check."""
    if not body or len(body) > MAX_BODY_BYTES:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(body).decode()
    if "json" in (content_type or "").lower() or text.lstrip()[:1] in ("{", "["):
        if jsontext.nests_within(body, limits.MAX_VALUE_DEPTH):
            try:
                return errors.parse_json_text(body)
            except errors.DittoError:
                pass
    return text


def live_response(signal: Mapping[str, Any], status: int, content_type: str | None, body: bytes) -> dict[str, Any]:
    """The live response an endpoint's response is, for a target issuing ``live-response``.

    For a live message: the message's response (its topic, its path's ``inbox`` as ``outbox``,
    the status, the body as its value). For a live command: the body, a Ditto Protocol command
    response, with the signal's correlation id and ack token (the response answers the request
    it came back on, whatever its body names). A status that is no final HTTP status answers
    503, Ditto's ``message.sending.failed`` the value."""
    headers = {"correlation-id": signal["headers"]["correlation-id"], "ack-token": signal["headers"].get("ack-token")}
    final = is_final(status)
    value = ack_value(content_type, body) if final else unknown_status_error(status)
    status = issued_status(status)
    if "/things/live/messages/" in signal["topic"]:
        path = str(signal.get("path", ""))
        return {"topic": signal["topic"], "headers": headers, "path": path.replace("/inbox/", "/outbox/", 1),
                "status": status, "value": value}
    if not isinstance(value, dict) or not final:  # no command response in the body: one built around it
        value = {"topic": signal["topic"], "path": signal.get("path", "/"), "status": status, "value": value}
    given = value.get("headers") if isinstance(value.get("headers"), dict) else {}
    return {**value, "headers": {**given, **headers}}


def request_body(method: str, payload: bytes) -> bytes | None:
    """What a request carries: the Ditto Protocol message, but none for GET and DELETE."""
    return None if method in WITHOUT_BODY else payload
