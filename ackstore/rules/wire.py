"""Wire shapes of acknowledgements (B.4): single ack, aggregated acks, the HTTP body."""

from __future__ import annotations

from typing import Any, Sequence

from ackstore.rules import errors, labels
from ackstore.rules.acks import ABSENT, Ack
from ackstore.rules.headers import CORRELATION_ID, REQUESTED_ACKS, WEAK_ACK

DITTO_CONTENT_TYPE = "application/vnd.eclipse.ditto+json"


def thing_topic_prefix(thing_id: str) -> str:
    namespace, _, name = thing_id.partition(":")
    return f"{namespace}/{name}/things"


def acks_topic(thing_id: str, channel: labels.Channel, label: str | None = None) -> str:
    topic = f"{thing_topic_prefix(thing_id)}/{channel}/acks"
    return topic if label is None else f"{topic}/{label}"


def external_headers(ack: Ack, correlation_id: str) -> dict[str, Any]:
    """An ack's headers in their external form: with its correlation id and weak flag,
    without ``requested-acks`` (B.4.1) and without a Ditto-protocol content type (B.4.3)."""
    headers = {k: v for k, v in ack.headers.items() if k != REQUESTED_ACKS}
    if headers.get("content-type") == DITTO_CONTENT_TYPE:
        del headers["content-type"]
    headers[CORRELATION_ID] = correlation_id
    if ack.weak:
        headers[WEAK_ACK] = True
    return headers


def ack_entry(ack: Ack, correlation_id: str) -> dict[str, Any]:
    """``{"status", "payload"?, "headers"}`` as in an aggregated body (B.4.2, B.4.3)."""
    entry: dict[str, Any] = {"status": ack.status}
    if ack.has_payload:
        entry["payload"] = ack.payload
    entry["headers"] = external_headers(ack, correlation_id)
    return entry


def status_only(ack: Ack) -> Ack:
    """An ack reduced to its status, as HTTP answers with ``response-required=false`` (B.4.3)."""
    return Ack(label=ack.label, status=ack.status)


def http_body(acks: Sequence[Ack], correlation_id: str) -> Any:
    """B.4.3: ≥2 acks → object keyed by label; exactly one → that ack's payload (ABSENT if none)."""
    if len(acks) == 1:
        return acks[0].payload
    return {ack.label: ack_entry(ack, correlation_id) for ack in acks}


def single_ack_message(thing_id: str, channel: labels.Channel, ack: Ack, correlation_id: str) -> dict[str, Any]:
    """A Ditto Protocol acknowledgement (B.4.1); built-in labels are never serialised alone."""
    if labels.is_builtin(ack.label):
        raise errors.label_forbidden(ack.label)
    message: dict[str, Any] = {
        "topic": acks_topic(thing_id, channel, ack.label),
        "headers": external_headers(ack, correlation_id),
        "path": "/",
        "status": ack.status,
    }
    if ack.has_payload:
        message["value"] = ack.payload
    return message


def aggregated_acks_message(
    thing_id: str, channel: labels.Channel, acks: Sequence[Ack], status: int, correlation_id: str
) -> dict[str, Any]:
    """A Ditto Protocol aggregated acknowledgements message (B.4.2)."""
    value: dict[str, Any] = {}
    for ack in acks:
        entry: dict[str, Any] = {"status": ack.status}
        if ack.has_payload:
            entry["payload"] = ack.payload
        headers = external_headers(ack, correlation_id)
        if headers:
            entry["headers"] = headers
        value[ack.label] = entry
    return {
        "topic": acks_topic(thing_id, channel),
        "headers": {CORRELATION_ID: correlation_id, "content-type": "application/json", "response-required": False},
        "path": "/",
        "value": value,
        "status": status,
    }


def body_or_none(body: Any) -> Any:
    """JSON-ready body: an absent payload becomes ``None`` (no body)."""
    return None if body is ABSENT else body
