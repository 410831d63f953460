"""Parsing Ditto Protocol envelopes: the signals ackstore stores and the acks subscribers send.

Everything here is pure: input is a dict (or JSON text / bytes), output is a frozen value
or a :class:`~ackstore.errors.DittoError`. Nothing that fails here reaches the database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

import msgspec

from ackstore.rules import errors, jsontext, labels, limits, numbers
from ackstore.rules.acks import ABSENT, Ack
from ackstore.rules.headers import CORRELATION_ID

ACK_TOKEN = "ack-token"  # header carrying the lease token of a hand-out (A.3)
_NOT_STORED = ("ditto-weak-ack", "requested-acks", ACK_TOKEN)
SignalKind = Literal["twin-command", "live-command", "live-message"]
SIGNAL_KINDS: tuple[SignalKind, ...] = get_args(SignalKind)
TWIN_ACTIONS = ("create", "modify", "merge", "delete")
LIVE_ACTIONS = ("create", "modify", "merge", "delete", "retrieve")
ACTIONS_WITH_VALUE = ("create", "modify", "merge")
# What parse_signal accepts, kind by kind: its channel and its actions (None: any subject but the
# empty one). The CHECK on `signals` is written from it (ackstore.ledger.schema), so that a write
# function refuses what ingestion refuses (issue 50); tests/unit/test_signal_shapes.py holds
# parse_signal to it.
SIGNAL_SHAPES: dict[SignalKind, tuple[labels.Channel, tuple[str, ...] | None]] = {
    "twin-command": ("twin", TWIN_ACTIONS),
    "live-command": ("live", LIVE_ACTIONS),
    "live-message": ("live", None),
}

# Ditto's namespaced entity id: namespace (may be empty) and a name without '/' or control chars.
_NAMESPACE = r"(?:|[a-zA-Z][a-zA-Z0-9_]*(?:[.-][a-zA-Z][a-zA-Z0-9_]*)*)"
_NAME = r"[^\x00-\x1F\x7F-\xFF/]+"
_ENTITY_ID = re.compile(rf"{_NAMESPACE}:{_NAME}")
_THING_TOPIC = re.compile(rf"(?P<ns>{_NAMESPACE})/(?P<name>{_NAME})/things/(?P<rest>.+)", re.DOTALL)


# What a thing is: Ditto's Thing JSON reads these members and drops every other a command gives (its
# computed _revision / _modified / _created, an inline _policy, a key it does not know).
THING_MEMBERS = frozenset(("thingId", "policyId", "definition", "attributes", "features"))


def thing_members(document: dict[str, Any]) -> dict[str, Any]:
    """A whole thing's members among THING_MEMBERS (the document itself when it has no other)."""
    if all(key in THING_MEMBERS for key in document):
        return document
    return {key: value for key, value in document.items() if key in THING_MEMBERS}


def is_entity_id(text: str) -> bool:
    """Whether ``text`` is a namespaced entity id Ditto takes (a thing's, a policy's): ``<namespace>:<name>``."""
    return _ENTITY_ID.fullmatch(text) is not None


class Signal(NamedTuple):
    """A parsed twin command, live command or live message (headers not yet normalised). A named
    tuple, not a frozen dataclass: one is made per envelope on the front door's hot path, and a
    frozen dataclass takes four times as long to make."""

    thing_id: str
    channel: labels.Channel
    kind: SignalKind
    action: str  # create / modify / merge / delete / retrieve, or a message subject
    topic: str
    path: str
    value: Any  # ABSENT when the envelope has none
    raw_headers: Mapping[str, Any]

    @property
    def namespace(self) -> str:
        return self.thing_id.partition(":")[0]


@dataclass(frozen=True)
class IncomingAcks:
    """A subscriber's single or aggregated acknowledgement, parsed and label-checked."""

    thing_id: str
    channel: labels.Channel
    correlation_id: str
    acks: tuple[Ack, ...]
    token: str | None = None  # the lease token of the hand-out it answers (A.3)


@dataclass(frozen=True)
class LiveResponse:
    """A subscriber's answer to a live command or live message (B.1 ``live-response``)."""

    thing_id: str
    correlation_id: str
    status: int
    value: Any  # ABSENT when the response has none
    headers: Mapping[str, Any]
    token: str | None = None
    criterion: str = "commands"  # commands | messages: what its topic says it answers
    action: str = ""  # the topic's command action or message subject
    path: str = "/"


class CheckedMessage(dict):
    """A message a reader made from a sender's text after :func:`parse_text` checked its depth —
    a broker's body with headers merged in that add no level (``connectivity.inbound_envelope``):
    :func:`load_envelope` does not check its depth again. Only such a reader makes one; a dict a
    caller gives is always checked.

    Two more things are known of it once, so that nothing on the inbound path reads them again:
    its topic (:func:`topic_of` reads it on the first ask and keeps it; its reader never changes
    it after) and, when its reader proved it, ``size_bound``: :func:`canonical_json` takes it and
    its text is at most that long — :func:`load_envelope` then encodes nothing to measure it."""

    __slots__ = ("_topic", "size_bound")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._topic: Topic | None = None
        self.size_bound: int | None = None


def load_envelope(envelope: object, max_bytes: int) -> dict[str, Any]:
    """Accept a dict, JSON text or UTF-8 bytes; enforce the size limit, the depth limit and
    JSON-ness (413 / 400). A :class:`CheckedMessage`'s depth was checked on its text."""
    given_text = isinstance(envelope, (str, bytes))
    if given_text:
        size = len(envelope.encode("utf-8", "surrogatepass") if isinstance(envelope, str) else envelope)
        if size > max_bytes:
            raise errors.message_too_large(size, max_bytes)
        plain = _plain_json_object(envelope, size, max_bytes)
        if plain is not None:
            return plain
        envelope = _parsed(envelope)  # its depth checked on its text
    elif type(envelope) is CheckedMessage and envelope.size_bound is not None and envelope.size_bound <= max_bytes:
        return envelope  # its reader proved it JSON within the limit: nothing to measure (or answer)
    text = canonical_json(envelope)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise errors.message_too_large(size, max_bytes)
    if not isinstance(envelope, dict):
        raise errors.json_invalid("A Ditto Protocol message must be a JSON object.")
    checked = given_text or type(envelope) is CheckedMessage
    if not checked and jsontext.bracket_bound(text) > limits.MAX_JSON_DEPTH:  # fewer brackets nest no deeper
        limits.check_json_depth(envelope, text)
    return envelope


def parse_text(text: str | bytes, max_bytes: int) -> Any:
    """The value of JSON text a sender chose: msgspec's, when the text is a plain object
    (:func:`_plain_json_object`), else the standard library's full parse, which raises 400
    ``json.invalid`` with its exact reasons (``errors.parse_json_text``) — nesting past
    limits.MAX_JSON_DEPTH too (``limits.check_text_depth``). For a reader that merges more into
    the value before it is stored (a connector's message: its headers)."""
    return read_text(text, max_bytes)[0]


def read_text(text: str | bytes, max_bytes: int) -> tuple[Any, int | None]:
    """:func:`parse_text`'s value, and — when the fast path read it — a bound its
    :func:`canonical_json` text is known to keep within, and to be taken by (``None``: not known)."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    plain = _plain_json_object(text, size, max_bytes)
    if plain is not None:
        return plain, size * _MAX_EXPANSION
    return _parsed(text), None


def _parsed(text: str | bytes) -> Any:
    """The full parse of a sender's text, its depth checked first."""
    limits.check_text_depth(text)
    return errors.parse_json_text(text)


# Compact JSON of a parsed text is at most this many times longer than the text ("1e15" is 4 bytes,
# 1000000000000000.0 is 18): text this much below the limit cannot exceed it when re-encoded.
_MAX_EXPANSION = 5
# A digit run this long may spell a number out of range (numbers.parse_int): the full path decides.
_LONG_DIGITS = re.compile(rf"[0-9]{{{numbers.MAX_INTEGER_DIGITS},}}")
_LONG_DIGITS_BYTES = re.compile(_LONG_DIGITS.pattern.encode())


def _plain_json_object(text: str | bytes, size: int, max_bytes: int) -> dict[str, Any] | None:
    """The JSON object of ``text`` when it needs none of canonical_json's checks — valid UTF-8,
    no NaN or infinite numbers, no escapes (a \\u escape could spell a lone surrogate or NUL), no
    member name twice and nested within limits.MAX_JSON_DEPTH (``jsontext.parse_plain``), no
    number near the range's end, far below the size limit. ``None`` otherwise: the full path
    decides, with its exact errors.

    This is the front door's hot path (ingesting a broker batch): it saves re-encoding every
    message only to find it fine. msgspec's decoder refuses what the standard library's would
    need those checks for (NaN, Infinity, a float out of range, bad UTF-8) and reads the rest
    to the same value."""
    if size * _MAX_EXPANSION > max_bytes:
        return None
    long_enough = size >= numbers.MAX_INTEGER_DIGITS
    if isinstance(text, bytes):
        if long_enough and _LONG_DIGITS_BYTES.search(text):
            return None
    elif long_enough and _LONG_DIGITS.search(text) or not text.isascii() and _has_surrogate(text):
        return None
    try:
        value = jsontext.parse_plain(text, limits.MAX_JSON_DEPTH)
    except (msgspec.DecodeError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if type(value) is dict else None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def canonical_json(value: object) -> str:
    """Compact JSON text of ``value``, or 400 ``json.invalid`` if PostgreSQL's jsonb could not
    hold it (non-JSON types, NaN, lone surrogates, the NUL character)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
    except RecursionError:  # json's encoder nests on Python's stack: far past the depth limit
        raise errors.json_too_deep(limits.MAX_JSON_DEPTH, jsontext.too_deep(value, limits.MAX_JSON_DEPTH)) from None
    except (TypeError, ValueError) as exc:
        if "integer string conversion" in str(exc):  # Python's digit limit, far past any JSON number we keep
            exc = numbers.NumberOutOfRange("of more than 4,300 digits")
        raise errors.json_invalid(f"The message is not valid JSON: {exc}.") from None
    if "\\u0000" in text and _contains_nul(value):
        raise errors.json_invalid("The message contains the character U+0000, which cannot be stored.")
    if numbers.LONG_DIGIT_RUN.search(text) and numbers.out_of_range(value):
        raise errors.json_invalid(f"The message is not valid JSON: it holds an integer out of range "
                                  f"(at most ±{numbers.MAX_MAGNITUDE:.7g}).")
    return text


_SHORT_INTEGER = 10 ** 18  # an integer within this is no digit run canonical_json looks at twice


def canonical_size_bound(value: object) -> int | None:
    """A bound of :func:`canonical_json`'s text of ``value`` (in bytes) when it surely takes it —
    text holding neither U+0000 nor a lone surrogate (at most six bytes a character, escaped), a
    short integer, a boolean, null, or an object or array of them; ``None`` when it is not sure
    (the full encoding decides). Cheaper than encoding a few header values only to measure them."""
    if value is None or isinstance(value, bool):
        return 5
    if isinstance(value, str):
        if "\x00" in value or not value.isascii() and _has_surrogate(value):
            return None
        return 6 * len(value) + 2
    if isinstance(value, int):
        return 20 if -_SHORT_INTEGER < value < _SHORT_INTEGER else None
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
        total = 2
        for key, item in items:  # each member: its key, ':', its value and ','
            key_bound = 0 if key is None else canonical_size_bound(key)
            item_bound = canonical_size_bound(item)
            if key_bound is None or item_bound is None:
                return None
            total += key_bound + item_bound + 2
        return total
    return None


def _contains_nul(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_signal(envelope: Mapping[str, Any]) -> Signal:
    """A twin command, live command or live message, or 400 for anything else."""
    topic = _topic(envelope)
    thing_id, channel, criterion, action = _split_thing_topic(topic)
    if criterion == "commands" and channel == "twin" and action in TWIN_ACTIONS:
        kind: SignalKind = "twin-command"
    elif criterion == "commands" and channel == "live" and action in LIVE_ACTIONS:
        kind = "live-command"
    elif criterion == "messages" and channel == "live" and action:
        kind = "live-message"
    elif criterion == "commands" and channel == "twin" and action == "retrieve":
        raise errors.unknown_topic(
            topic.text,
            "Twin queries request no acknowledgements and are not stored in the ledger; "
            "read the twin instead.",
        )
    else:
        raise errors.unknown_topic(topic.text)
    path = _required(envelope, "path", str, "String")
    if not (path == "" or path.startswith("/")):
        raise errors.json_field_invalid("/path", "JSON pointer")
    limits.check_pointer(path)
    value = envelope.get("value", ABSENT)
    if kind == "twin-command" and action in ACTIONS_WITH_VALUE and value is ABSENT:
        raise errors.json_field_missing("/value")
    if kind == "twin-command" and path in ("", "/") and isinstance(value, dict):
        value = thing_members(value)  # a whole thing in Ditto's words: what its Thing JSON reads
    raw_headers = envelope.get("headers", {})
    if not isinstance(raw_headers, Mapping):
        raise errors.json_field_invalid("/headers", "JSON object")
    return Signal(thing_id, channel, kind, action, topic.text, path or "/", value, raw_headers)


def parse_acknowledgement(envelope: Mapping[str, Any]) -> IncomingAcks:
    """A single (``…/acks/<label>``) or aggregated (``…/acks``) acknowledgement (B.4.1, B.4.2)."""
    topic = _topic(envelope)
    thing_id, channel, criterion, label = _split_thing_topic(topic)
    if criterion != "acks":
        raise errors.unknown_topic(topic.text, "An acknowledgement's topic ends in /acks or /acks/<label>.")
    headers, correlation_id, token = _answer_headers(envelope)
    if label:
        status = _status(envelope.get("status"), "/status")
        ack = Ack(labels.validate_issuable(label), status, envelope.get("value", ABSENT), _ack_headers(headers))
        return IncomingAcks(thing_id, channel, correlation_id, (ack,), token)
    value = _required(envelope, "value", Mapping, "JSON object")
    acks = tuple(_aggregated_entry(name, entry) for name, entry in value.items())
    return IncomingAcks(thing_id, channel, correlation_id, acks, token)


def parse_live_response(envelope: Mapping[str, Any]) -> LiveResponse:
    """A live command response or message response: ``…/things/live/commands/<action>`` or
    ``…/things/live/messages/<subject>``, the answered signal's correlation id and a status."""
    topic = _topic(envelope)
    thing_id, channel, criterion, action = _split_thing_topic(topic)
    if channel != "live" or criterion not in ("commands", "messages"):
        raise errors.unknown_topic(topic.text, "A live response's topic is the live command's or live message's topic.")
    headers, correlation_id, token = _answer_headers(envelope)
    status = _status(envelope.get("status"), "/status")
    path = envelope.get("path", "/")
    if not isinstance(path, str):
        raise errors.json_field_invalid("/path", "String")
    limits.check_pointer(path)
    return LiveResponse(thing_id, correlation_id, status, envelope.get("value", ABSENT), _ack_headers(headers), token,
                        criterion, action, path or "/")


def _answer_headers(envelope: Mapping[str, Any]) -> tuple[Mapping[str, Any], str, str | None]:
    """The headers of an ack or live response, its correlation id and its lease token."""
    headers = envelope.get("headers", {})
    if not isinstance(headers, Mapping):
        raise errors.json_field_invalid("/headers", "JSON object")
    correlation_id = headers.get(CORRELATION_ID)
    if correlation_id is None or correlation_id == "":
        raise errors.correlation_id_missing()
    if not isinstance(correlation_id, str):
        raise errors.header_invalid_type(CORRELATION_ID, json.dumps(correlation_id), "String")
    limits.check_correlation_id(correlation_id)
    token = headers.get(ACK_TOKEN)
    if token is not None and not isinstance(token, str):
        raise errors.header_invalid_type(ACK_TOKEN, json.dumps(token), "String")
    return headers, correlation_id, token


def _aggregated_entry(label: str, entry: object) -> Ack:
    labels.validate_issuable(label)
    if not isinstance(entry, Mapping):
        raise errors.json_field_invalid(f"/value/{label}", "JSON object")
    status = _status(entry.get("status"), f"/value/{label}/status")
    headers = entry.get("headers", {})
    if not isinstance(headers, Mapping):
        raise errors.json_field_invalid(f"/value/{label}/headers", "JSON object")
    return Ack(label, status, entry.get("payload", ABSENT), _ack_headers(headers))


def _ack_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    # A client cannot fake a weak ack (B.4.4) nor request acks on an ack (B.4.1); the lease
    # token is transport, not part of the stored ack.
    return {str(k).lower(): v for k, v in headers.items() if str(k).lower() not in _NOT_STORED}


def _status(value: object, pointer: str) -> int:
    if value is None:
        raise errors.json_field_missing(pointer)
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 599:
        raise errors.json_field_invalid(pointer, "HTTP status code (an integer from 100 to 599)")
    return value


class Topic(NamedTuple):
    """A message's topic, read once (:func:`read_topic`): whatever the inbound path asks of it —
    whose thing, an acknowledgement or not, the signal it spells — it asks this value, never
    the text again."""

    text: str
    segments: list[str]  # the text split at every "/"
    thing: tuple[str, labels.Channel] | None  # :func:`thing_of_topic`'s answer

    @property
    def is_acknowledgement(self) -> bool:
        """Whether it is an acknowledgement's (``…/things/<channel>/acks[/<label>]``) rather than
        a signal's: a connection's source may carry its subscribers' acks."""
        segments = self.segments
        return len(segments) >= 5 and segments[2] == "things" and segments[4] == "acks"


def read_topic(text: str) -> Topic:
    """A topic's text as the :class:`Topic` every later question is asked of."""
    match = _THING_TOPIC.fullmatch(text)
    segments = text.split("/")
    thing: tuple[str, labels.Channel] | None = None
    if match is not None:  # namespace and name hold no "/": they are the first two segments
        thing = f"{segments[0]}:{segments[1]}", "live" if segments[3] == "live" else "twin"
    return Topic(text, segments, thing)


def topic_of(envelope: object) -> Topic | None:
    """The topic of a message whose ``topic`` is text, read once for a :class:`CheckedMessage`
    (it keeps it); ``None`` for anything else (the ledger answers a malformed message)."""
    if type(envelope) is CheckedMessage:
        if envelope._topic is None and isinstance(envelope.get("topic"), str):
            envelope._topic = read_topic(envelope["topic"])
        return envelope._topic
    if isinstance(envelope, Mapping) and isinstance(envelope.get("topic"), str):
        return read_topic(envelope["topic"])
    return None


def thing_of_topic(topic: str) -> tuple[str, labels.Channel] | None:
    """``(<ns>:<name>, channel)`` of a topic that names a thing, ``None`` otherwise; the channel
    is ``twin`` unless the topic says ``live`` (an error about a bad topic goes to the twin's)."""
    return read_topic(topic).thing


def _topic(envelope: Mapping[str, Any]) -> Topic:
    """The topic a signal, ack or live response must have (400 without one)."""
    _required(envelope, "topic", str, "String")
    topic = topic_of(envelope)
    assert topic is not None  # its text was just required
    return topic


def _split_thing_topic(topic: Topic) -> tuple[str, labels.Channel, str, str]:
    """``<ns>/<name>/things/<channel>/<criterion>[/<rest>]`` → (thing id, channel, criterion, rest)."""
    if topic.thing is None:
        raise errors.unknown_topic(topic.text)
    segments = topic.segments
    channel = segments[3]
    criterion = segments[4] if len(segments) > 4 else ""
    if channel not in ("twin", "live") or not criterion:
        raise errors.unknown_topic(topic.text)
    thing_id = limits.check_thing_id(topic.thing[0])
    return thing_id, channel, criterion, "/".join(segments[5:])  # type: ignore[return-value]


def _required(envelope: Mapping[str, Any], name: str, kind: type | tuple[type, ...], kind_name: str) -> Any:
    if name not in envelope:
        raise errors.json_field_missing(f"/{name}")
    value = envelope[name]
    if not isinstance(value, kind):
        raise errors.json_field_invalid(f"/{name}", kind_name)
    return value
