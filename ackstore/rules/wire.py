"""Wire shapes (B.4): the Ditto Protocol messages as they go out on the wire — a thing's topics, a
single ack, aggregated acks, the HTTP body, an error, a decided result — and Ditto's content type."""

from __future__ import annotations

from typing import Any, Mapping, Sequence
from urllib.parse import quote

from ackstore.rules import envelopes, errors, labels
from ackstore.rules.acks import ABSENT, Ack
from ackstore.rules.headers import CORRELATION_ID, REQUESTED_ACKS, WEAK_ACK

DITTO_CONTENT_TYPE = "application/vnd.eclipse.ditto+json"


def thing_topic_prefix(thing_id: str) -> str:
    namespace, _, name = thing_id.partition(":")
    return f"{namespace}/{name}/things"


def acks_topic(thing_id: str, channel: labels.Channel, label: str | None = None) -> str:
    topic = f"{thing_topic_prefix(thing_id)}/{channel}/acks"
    return topic if label is None else f"{topic}/{label}"


def location(thing_id: str, path: str) -> str:
    """The created resource in Ditto's HTTP API form: ``/api/2/things/<thing id>[<path>]``, the
    ``location`` header the gateway adds to a 201 ``twin-persisted`` entry (B.4.3)."""
    resource = "" if path in ("", "/") else quote(path, safe="/:~@!$&'()*+,;=")
    return f"/api/2/things/{quote(thing_id, safe=':@!$&()*+,;=')}{resource}"


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


# --- what a connection publishes to a message's reply-to (B.7's connectivity column) ----------


def error_message(error: Mapping[str, Any], *, thing_id: str | None, channel: str, correlation_id: str | None) -> dict[str, Any]:
    """A Ditto Protocol error: ``<ns>/<name>/things/<channel>/errors`` with the error as value
    (``_/_/things/twin/errors`` when the message named no thing)."""
    prefix = thing_topic_prefix(thing_id) if thing_id else "_/_/things"
    headers: dict[str, Any] = {"content-type": DITTO_CONTENT_TYPE}
    if correlation_id:
        headers[CORRELATION_ID] = correlation_id
    return {"topic": f"{prefix}/{channel}/errors", "headers": headers, "path": "/",
            "value": dict(error), "status": error["status"]}


def error_reply(error: Mapping[str, Any], envelope: object, correlation_id: str | None = None) -> dict[str, Any]:
    """:func:`error_message` answering a refused message: on its thing's channel and with its
    correlation id when it named them (``correlation_id`` otherwise)."""
    thing: tuple[str, labels.Channel] | None = None
    topic = envelopes.topic_of(envelope)  # read once for a connector's checked message (it keeps it)
    if topic is not None:
        thing = topic.thing
        given = envelope.get("headers")  # type: ignore[union-attr]  # a Mapping: it had a topic
        if isinstance(given, Mapping) and isinstance(given.get(CORRELATION_ID), str):
            correlation_id = given[CORRELATION_ID]
    thing_id, channel = thing or (None, "twin")
    return error_message(error, thing_id=thing_id, channel=channel, correlation_id=correlation_id)


def result_message(
    *,
    thing_id: str,
    channel: labels.Channel,
    topic: str,
    path: str,
    correlation_id: str,
    cause: str,
    status: int,
    body: Any,
    ack_statuses: Mapping[str, int],
) -> dict[str, Any]:
    """A decided result as the Ditto Protocol message a connection publishes (B.4, B.5):
    aggregated acks, the plain command or live response, or the error."""
    if cause == "acks":
        if len(ack_statuses) == 1:  # the HTTP body of one ack is its bare payload (B.4.3)
            (label, ack_status), = ack_statuses.items()
            ack = Ack(label, ack_status, ABSENT if body is None else body)
            value: Any = {label: ack_entry(ack, correlation_id)}
        else:
            value = body
        return {"topic": acks_topic(thing_id, channel), "path": "/", "status": status, "value": value,
                "headers": {CORRELATION_ID: correlation_id, "content-type": DITTO_CONTENT_TYPE}}
    if cause in ("error", "deadline") or status >= 400:
        error = body if isinstance(body, Mapping) and "error" in body else {"status": status}
        return error_message(error, thing_id=thing_id, channel=channel, correlation_id=correlation_id)
    message: dict[str, Any] = {"topic": topic, "path": path, "status": status,
                               "headers": {CORRELATION_ID: correlation_id, "content-type": DITTO_CONTENT_TYPE}}
    if body is not None:
        message["value"] = body
    return message
