"""Who receives a signal, what a weak ack says, and lease tokens (B.1, B.8, B.12, A.3).

A subscriber receives a twin event or a live signal when it consumes the signal's channel,
its namespaces (if any) include the thing's namespace, and its RQL filter (if any) holds for
the signal's *view*: the signal's content in the shape of a thing — a modify of
``/attributes/x`` to 1 is ``{"thingId": …, "attributes": {"x": 1}}`` — plus the ``topic:`` and
``resource:`` placeholders (``topic:action``, ``resource:path`` …). A label's weak ack is due
when no subscriber of the group that declared it receives the signal (B.8).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from ackstore.rules import durations, errors, labels, rql, rql_eval
from ackstore.rules.envelopes import ACK_TOKEN
from ackstore.rules.headers import CORRELATION_ID, REQUESTED_ACKS, WEAK_ACK

DELIVERY_COUNT = "delivery-count"  # header: how often this signal was handed to the subscriber
_CRITERIA = {"twin-event": "events", "live-command": "commands", "live-message": "messages"}


@dataclass(frozen=True)
class Subscriber:
    """What delivery needs to know of a subscriber (a row of ``subscribers``)."""

    id: str
    channels: tuple[str, ...]
    namespaces: tuple[str, ...] | None = None  # None: every namespace
    filter: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Subscriber":
        namespaces = row.get("namespaces")
        return cls(row["id"], tuple(row["channels"]), tuple(namespaces) if namespaces is not None else None,
                   row.get("filter"))


@dataclass(frozen=True)
class SignalView:
    """A twin event or live signal as filters see it."""

    kind: str  # twin-event, live-command or live-message
    thing_id: str
    action: str  # event action (created, modified …), command action, or message subject
    path: str
    value: Any = None
    deleted: bool = False  # a deleted event: nothing is left at its path

    @property
    def channel(self) -> str:
        return "twin" if self.kind == "twin-event" else "live"

    @property
    def namespace(self) -> str:
        return self.thing_id.partition(":")[0]

    def thing_shape(self) -> dict[str, Any]:
        """The signal's content where it would sit in a thing; a message carries no thing content."""
        shaped: dict[str, Any] = {"thingId": self.thing_id}
        if self.kind == "live-message" or self.deleted:
            return shaped
        segments = [_unescape(part) for part in self.path.strip("/").split("/") if part]
        if not segments:
            return {**self.value, "thingId": self.thing_id} if isinstance(self.value, dict) else shaped
        nested: Any = self.value
        for segment in reversed(segments):
            nested = {segment: nested}
        return {**nested, "thingId": self.thing_id}

    def placeholders(self) -> dict[str, str]:
        namespace, _, name = self.thing_id.partition(":")
        return {
            "topic:namespace": namespace,
            "topic:entityName": name,
            "topic:group": "things",
            "topic:channel": self.channel,
            "topic:criterion": _CRITERIA[self.kind],
            "topic:action": self.action,
            "resource:type": "thing",
            "resource:path": self.path or "/",
        }


def event_view(thing_id: str, action: str, path: str, value: Any) -> SignalView:
    """A twin event as filters see it (a deleted event leaves nothing at its path)."""
    return SignalView("twin-event", thing_id, action, path, value, deleted=action == "deleted")


def exclusion(subscriber: Subscriber, view: SignalView, *, now: datetime | None = None) -> str | None:
    """Why ``subscriber`` does not receive the signal, or ``None`` when it does."""
    if view.channel not in subscriber.channels:
        return f"subscriber <{subscriber.id}> does not consume the {view.channel} channel"
    if subscriber.namespaces is not None and view.namespace not in subscriber.namespaces:
        return f"subscriber <{subscriber.id}> does not subscribe to namespace <{view.namespace}>"
    if subscriber.filter is not None:
        parsed = parsed_filter(subscriber.filter)
        if isinstance(parsed, errors.DittoError):  # declared before the bounds: it matches nothing
            return f"subscriber <{subscriber.id}>'s filter is refused: {parsed.message} It receives nothing until declared again"
        rows = rql_eval.rows_by_path(view.thing_shape(), view.placeholders())
        if not rql_eval.matches(parsed, rows, now=now):
            return f"subscriber <{subscriber.id}>'s filter <{subscriber.filter}> excludes the signal"
    return None


@lru_cache(maxsize=1024)
def parsed_filter(expression: str) -> rql.Node | errors.DittoError:
    """A subscriber's filter, parsed once per process (filters change only by a declaration) within
    the bounds the door holds a filter to (``rql.parse_sent``, decisions #117). A filter a ledger
    stored before them and past them is the door's refusal, kept as the answer: its evaluation
    costs nothing, and it matches no signal (decisions #132)."""
    try:
        return rql.parse_sent(expression)
    except errors.DittoError as refusal:
        return refusal.with_traceback(None)  # kept: no frame of the parse with it


def filter_refusal(subscriber: Subscriber) -> errors.DittoError | None:
    """The door's 400 for the subscriber's stored filter, when the door would refuse it now: what
    its pull is answered until it declares a filter within the bounds (decisions #132)."""
    if subscriber.filter is None:
        return None
    parsed = parsed_filter(subscriber.filter)
    return errors.stored_filter_refused(subscriber.id, parsed) if isinstance(parsed, errors.DittoError) else None


def weak_ack_reason(
    label: str, group: Sequence[Subscriber], view: SignalView, *, now: datetime | None = None
) -> str | None:
    """The weak ack's payload when no subscriber of the declaring ``group`` receives the signal
    (B.8); ``None`` when one does, and its own ack is awaited."""
    reasons = []
    for subscriber in group:
        reason = exclusion(subscriber, view, now=now)
        if reason is None:
            return None
        reasons.append(reason)
    return (
        f"Acknowledgement <{label}> was issued as a weak acknowledgement because no subscriber that declared "
        f"it receives the signal: {'; '.join(reasons)}."
    )


def weak_ack_headers(correlation_id: str) -> dict[str, Any]:
    return {CORRELATION_ID: correlation_id, WEAK_ACK: True}


def outbound_headers(headers: Mapping[str, Any], token: str, delivery_count: int,
                     declared: Iterable[str]) -> dict[str, Any]:
    """Headers of a signal handed to a subscriber: ``requested-acks`` keeps only the labels the
    subscriber's group declared — never a built-in one, never another subscriber's (B.1; Ditto's
    ``StreamingSessionActorTest.acknowledgementRequestsAreRestrictedToDeclaredAcks``) — and is
    dropped when nothing is left; the lease token and delivery count are added."""
    out = {k: v for k, v in headers.items() if k not in (ACK_TOKEN, DELIVERY_COUNT)}
    issuable = set(declared)
    own = [label for label in out.pop(REQUESTED_ACKS, None) or ()
           if label in issuable and not labels.is_builtin(label)]
    if own:
        out[REQUESTED_ACKS] = own
    out[ACK_TOKEN] = token
    out[DELIVERY_COUNT] = delivery_count
    return out


def expects_ack(requested: Iterable[str], declared: Iterable[str], *, live: bool) -> bool:
    """Whether a hand-out waits for the subscriber's answer: the signal requests a label its
    group declared, or it is a live signal awaiting its live response."""
    wanted = set(requested)
    return bool(wanted & set(declared)) or (live and labels.LIVE_RESPONSE in wanted)


# --- lease tokens (A.3): "<hand-out number>.<MAC>" -----------------------------------------------
# The MAC is keyed by a secret random key of the (subscriber, signal) delivery, so a token names
# its hand-out and cannot be forged, moved to another delivery or to another hand-out.


MAX_HANDOUT_DIGITS = 18  # hand-outs are counted in a bigint


def lease_token(key: str, handout: int) -> str:
    return f"{handout}.{_mac(key, handout)}"


def token_handout(token: object, key: str) -> int:
    """The hand-out number a token was issued for; 400 ``acknowledgement:token.invalid`` for a
    token this delivery never issued."""
    if isinstance(token, str) and token.isascii():  # compare_digest takes ASCII text only
        number, _, mac = token.partition(".")
        # ASCII digits only (str.isdigit() also takes "²"), no longer than a hand-out count can be,
        # and written as it was issued: "01" is not hand-out 1's token.
        if (0 < len(number) <= MAX_HANDOUT_DIGITS and number.isdigit() and not number.startswith("0")
                and hmac.compare_digest(mac, _mac(key, int(number)))):
            return int(number)
    raise errors.token_invalid(token)


def _mac(key: str, handout: int) -> str:
    return hmac.new(key.encode(), str(handout).encode(), hashlib.sha256).hexdigest()[:32]


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


# --- pull parameters -------------------------------------------------------------------------

MAX_LEASE_MS = 12 * 3_600_000
MAX_PULL = 1000


def lease_ms(lease: object) -> int:
    """A lease as milliseconds (``30s``, ``5m``, a bare number of seconds); 400 when it is not a
    duration from 1 ms to 12 h."""
    text = lease if isinstance(lease, str) else str(lease)
    try:
        millis = durations.parse_duration_ms(text)
    except errors.DittoError:
        millis = 0
    if not 0 < millis <= MAX_LEASE_MS:
        raise errors.lease_invalid(text, "12h")
    return millis


def pull_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PULL:
        raise errors.pull_max_invalid(value, MAX_PULL)
    return value
