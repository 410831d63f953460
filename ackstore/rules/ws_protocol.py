"""Ditto's WebSocket protocol binding (``/ws/2``, issue 51) in the ledger's terms: the text frames
that are no Ditto Protocol message (``START-SEND-EVENTS?filter=…``, ``STOP-SEND-…``, answered
``…:ACK``), the ``declared-acks`` a socket gives at connect (B.3), what kind of message a frame is,
and what the socket answers a command with (A.2.3: the WebSocket outcome table, ``api="websocket"``).
Pure: the door (``ackstore/doors/socket.py``) does the I/O.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Mapping, NamedTuple
from urllib.parse import parse_qsl

from ackstore.rules import envelopes, fields, limits, rql, wire
from ackstore.rules.connectivity import is_acknowledgement
from ackstore.rules.headers import AckRequest, Outcome, requested_acks_text_items

PATH = "/ws/2"
DECLARED_ACKS = "declared-acks"
# A decision comes at the latest with the first pass after the request's deadline (A.2.1; a pass a
# minute): the socket waits that long and two passes more for it (decisions #136).
DECISION_MARGIN_MS = 120_000
_CONTROL = re.compile(r"(?P<verb>START|STOP)-SEND-(?P<stream>EVENTS|MESSAGES|LIVE-COMMANDS|LIVE-EVENTS)"
                      r"(?:\?(?P<query>.*))?", re.DOTALL)

FrameKind = Literal["ack", "response", "signal"]

# What each stream receives of the ledger's signals, as a term of the login's subscriber's filter
# (the placeholders a filter sees: ackstore.rules.subscriptions.SignalView.placeholders). The
# ledger has no live events: LIVE-EVENTS is acknowledged and adds nothing.
_STREAM_TERMS = {"EVENTS": ('eq(topic:channel,"twin")',), "MESSAGES": ('eq(topic:criterion,"messages")',),
                 "LIVE_COMMANDS": ('eq(topic:channel,"live")', 'eq(topic:criterion,"commands")')}
LIVE_STREAMS = ("MESSAGES", "LIVE_COMMANDS")
PUSHED_STREAMS = tuple(_STREAM_TERMS)  # a socket pulls and pushes while one of them is started


class Control(NamedTuple):
    """A ``START-SEND-*`` / ``STOP-SEND-*`` frame with its parameters (Ditto's names)."""

    start: bool
    stream: str  # EVENTS, MESSAGES, LIVE_COMMANDS or LIVE_EVENTS
    filter: str | None = None
    namespaces: tuple[str, ...] | None = None
    extra_fields: tuple[fields.Pointer, ...] | None = None  # what of its thing a pushed signal carries as ``extra``

    @property
    def text(self) -> str:
        return f"{'START' if self.start else 'STOP'}-SEND-{self.stream.replace('_', '-')}"

    @property
    def acknowledged(self) -> str:
        """What Ditto answers a control frame it took: the frame's name and ``:ACK``."""
        return f"{self.text}:ACK"


def control(text: str) -> Control | None:
    """The control frame ``text`` is, None when it is none (then it must be a Ditto Protocol
    message), or the 400 for a bad ``filter`` or ``namespaces``. Parameters are URL-encoded, as
    Ditto's clients send them; one Ditto does not know is ignored, as Ditto ignores it."""
    match = _CONTROL.fullmatch(text)
    if match is None:
        return None
    start = match.group("verb") == "START"
    stream = match.group("stream").replace("-", "_")
    if not start:
        return Control(False, stream)  # Ditto's STOP takes no parameters
    params = dict(parse_qsl(match.group("query") or "", keep_blank_values=True))
    expression = params.get("filter") or None
    if expression is not None:
        limits.check_text("filter", expression)
        rql.parse_sent(expression)  # 400 rql.expression.invalid, where it went wrong
    namespaces = None
    if params.get("namespaces"):
        namespaces = tuple(part.strip() for part in params["namespaces"].split(",") if part.strip())
        for namespace in namespaces:
            limits.check_text("namespace", namespace)
    extra = fields.parse(params["extraFields"]) if params.get("extraFields") else None
    return Control(True, stream, expression, namespaces, extra)


class Subscription(NamedTuple):
    """What the login's subscriber is declared with (``AckStore.declare``'s channels and filter)."""

    channels: tuple[str, ...]
    filter: str | None


BARE = Subscription(("twin",), None)  # as a socket declares at connect: every twin event, no live signal


def subscription(started: Mapping[str, Control]) -> Subscription:
    """The login's subscriber for the streams its socket started (decisions #136): one subscriber,
    whose filter joins each stream's own — its term, its ``filter``, its ``namespaces`` — by
    ``or``, with the live channel while a live stream is started. Twin events stay the
    subscriber's while no EVENTS stream narrows them, as before any START: a request of one of its
    labels waits for its ack, never a weak one for a stream not started. The streams' filters
    together are bounded as one filter is (5 KiB: the declaration's 400)."""
    terms = [_narrowed(term, started.get(stream)) for stream, term in _STREAM_TERMS.items()
             if stream in started or stream == "EVENTS"]
    channels = ("twin", "live") if any(stream in started for stream in LIVE_STREAMS) else ("twin",)
    if terms == [_STREAM_TERMS["EVENTS"][0]]:
        return BARE
    return Subscription(channels, terms[0] if len(terms) == 1 else f"or({','.join(terms)})")


def _narrowed(terms: tuple[str, ...], given: Control | None) -> str:
    """A stream's terms, narrowed by its frame's ``filter`` and ``namespaces``."""
    parts = list(terms)
    if given is not None and given.filter:
        parts.append(given.filter)
    if given is not None and given.namespaces:
        parts.append(f"in(topic:namespace,{','.join(rql.quoted(namespace) for namespace in given.namespaces)})")
    return parts[0] if len(parts) == 1 else f"and({','.join(parts)})"


def declared_labels(given: str | None) -> list[Any]:
    """The labels a socket declares at connect (``declared-acks``: comma-separated or a JSON
    array, B.3), as given: the ledger's declaration checks each (400) and their uniqueness (409)."""
    if given is None or not given.strip():
        return []
    return requested_acks_text_items(given, DECLARED_ACKS)


def subscriber_of(login: str) -> str:
    """The subscriber a login's sockets act as: one per login, so that a socket that reconnects
    is the same subscriber (its declared labels, its hand-outs), and another login declaring one
    of its labels is refused (B.3's uniqueness, decisions #136)."""
    return f"websocket:{login}"


def kind(envelope: Mapping[str, Any]) -> FrameKind:
    """What a Ditto Protocol message sent over a socket is: an acknowledgement (``…/acks[/label]``),
    a response (it has a ``status``: a live response), or a signal to store."""
    if is_acknowledgement(envelope):
        return "ack"
    return "response" if "status" in envelope else "signal"


def stream_of(message: Mapping[str, Any]) -> str | None:
    """The stream a handed-out signal is pushed on: a twin event's EVENTS, a live message's
    MESSAGES, a live command's LIVE_COMMANDS (None: no signal a stream pushes)."""
    topic = envelopes.topic_of(message)
    if topic is None or topic.thing is None:
        return None
    if topic.thing[1] == "twin":
        return "EVENTS"
    return "MESSAGES" if topic.segments[4:5] == ["messages"] else "LIVE_COMMANDS"  # <ns>/<name>/things/live/<criterion>


def with_extra(message: dict[str, Any], selected: Mapping[str, Any]) -> dict[str, Any]:
    """A pushed signal with what its stream's ``extraFields`` selected of its thing (Ditto's ``extra``),
    as it is when there is nothing."""
    return {**message, "extra": dict(selected)} if selected else message


def is_live(message: Mapping[str, Any]) -> bool:
    """Whether a message handed out is a live signal (a live command or message), not a twin event."""
    topic = envelopes.topic_of(message)
    return topic is not None and topic.thing is not None and topic.thing[1] == "live"


def answers(request: AckRequest) -> bool:
    """Whether the socket answers a stored command (B.7's WebSocket column): not when it asked
    for no response and no acks."""
    return request.outcome is not Outcome.NO_RESPONSE


def wait_ms(request: AckRequest) -> int:
    """How long the socket waits for a command's decision: its deadline and two passes."""
    return request.timeout_ms + DECISION_MARGIN_MS


def answer(signal: envelopes.Signal, request: AckRequest, decision: Mapping[str, Any]) -> dict[str, Any]:
    """The ledger's decision of a command sent over a socket as the Ditto Protocol message Ditto
    sends back: the aggregated acks, the command's response, or the error (wire.result_message,
    as a connection publishes it)."""
    return wire.result_message(
        thing_id=signal.thing_id, channel=signal.channel, topic=signal.topic, path=signal.path,
        correlation_id=request.correlation_id, cause=decision.get("cause") or "", status=decision["status"],
        body=decision.get("body"), ack_statuses=decision.get("ack_statuses") or {})


def refused(error: Mapping[str, Any], envelope: object = None) -> dict[str, Any]:
    """Ditto's error message (``error``: a DittoError's JSON, or the ledger's refusal) answering a
    frame: on its thing's channel with its correlation id when it named them (wire.error_reply)."""
    return wire.error_reply(error, envelope)
