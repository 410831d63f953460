"""What an HTTP push target does with a signal and its endpoint's response, as pure rules (B.9's
HTTP push row, Ditto's ``HttpPublisherActor``, decisions #113).

* :func:`parse_address` reads a target's ``VERB:/path``.
* :func:`issued_status` is the target's label from what happened to the request: the response's
  status (2xx, 4xx, 5xx alike); no answer within the timeout, 408; the request failing (refused,
  reset), 500 (Ditto's ``DefaultExceptionToAcknowledgementConverter``: a generic publish failure).
* :func:`ack_value` is the ack's value from the response body: its JSON, else its text, else its
  bytes in base64 (Ditto's order).
* :func:`live_response` is the live response the endpoint's response is, for a target that issues
  ``live-response``: a message's response built from the status and body; a live command's, the
  body itself (a Ditto Protocol command response).
"""

from __future__ import annotations

import base64
from typing import Any, Mapping

from ackstore.rules import errors

METHODS = ("POST", "PUT", "PATCH", "GET", "DELETE")
WITHOUT_BODY = ("GET", "DELETE")  # Ditto's omitRequestBody default
TIMED_OUT = 408
FAILED = 500
MAX_BODY_BYTES = 100_000  # Ditto's issued-max-bytes: a larger response's value is not kept


def parse_address(address: object) -> tuple[str, str]:
    """``VERB:/path`` (Ditto's HTTP push target address) as (method, path); ValueError saying why not."""
    if not isinstance(address, str) or ":" not in address:
        raise ValueError("must be VERB:/path, such as POST:/events")
    method, _, path = address.partition(":")
    if method not in METHODS:
        raise ValueError(f"names no HTTP method of {', '.join(METHODS)}")
    if not path.startswith("/") or any(c in path for c in " \r\n\t") or "{{" in path:
        raise ValueError("needs a path that starts with / (no spaces, no placeholders)")
    return method, path


def issued_status(status: int | None, timed_out: bool = False) -> int:
    """The target's label: the response's status; 408 when none came in time; 500 when the request failed."""
    if status is not None:
        return status
    return TIMED_OUT if timed_out else FAILED


def ack_value(content_type: str | None, body: bytes) -> Any:
    """The ack's value from a response body: JSON when it is (whatever its content type says, as
    Ditto reads a JSON or Ditto content type), else UTF-8 text, else base64; None when empty or
    past :data:`MAX_BODY_BYTES`."""
    if not body or len(body) > MAX_BODY_BYTES:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(body).decode()
    if "json" in (content_type or "").lower() or text.lstrip()[:1] in ("{", "["):
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
    it came back on, whatever its body names)."""
    headers = {"correlation-id": signal["headers"]["correlation-id"], "ack-token": signal["headers"].get("ack-token")}
    if "/things/live/messages/" in signal["topic"]:
        path = str(signal.get("path", ""))
        return {"topic": signal["topic"], "headers": headers, "path": path.replace("/inbox/", "/outbox/", 1),
                "status": status, "value": ack_value(content_type, body)}
    value = ack_value(content_type, body)
    if not isinstance(value, dict):
        value = {"topic": signal["topic"], "path": signal.get("path", "/"), "status": status, "value": value}
    given = value.get("headers") if isinstance(value.get("headers"), dict) else {}
    return {**value, "headers": {**given, **headers}}


def request_body(method: str, payload: bytes) -> bytes | None:
    """What a request carries: the Ditto Protocol message, but none for GET and DELETE."""
    return None if method in WITHOUT_BODY else payload
