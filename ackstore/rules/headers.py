"""Header normalisation and validation of an incoming signal (B.6, B.7 steps A–E, A.2.2).

One pure function, :func:`normalize`, turns the raw headers of a twin command, live
command or live message into the acknowledgement request ackstore stores, or raises
the :class:`~ackstore.errors.DittoError` the requester is answered with.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Literal, NamedTuple

from ackstore.rules import errors, labels, limits, numbers
from ackstore.rules.durations import parse_duration_ms
from ackstore.rules.settings import Settings

Api = Literal["http", "websocket", "connectivity"]
APIS: tuple[Api, ...] = ("http", "websocket", "connectivity")

CORRELATION_ID = "correlation-id"
REQUESTED_ACKS = "requested-acks"
RESPONSE_REQUIRED = "response-required"
TIMEOUT = "timeout"
WEAK_ACK = "ditto-weak-ack"  # written by ackstore only, never read from clients (B.4.4)


class Outcome(str, Enum):
    """What the requester gets, per API (B.7's outcome table, rows without an error)."""

    ACCEPTED = "accepted"  # HTTP: 202 at once
    ACCEPTED_AFTER_ACKS = "accepted-after-acks"  # HTTP: 202 once all acks succeed, else the failure
    RESPONSE = "response"  # the plain command response (connectivity: published, settled at once)
    AGGREGATED = "aggregated"  # the aggregated result, B.5 (connectivity: settled after the acks)
    NO_RESPONSE = "no-response"  # WebSocket: nothing is sent
    SETTLED_AT_ONCE = "settled-at-once"  # connectivity: nothing published, settled, not counted
    SETTLED_AFTER_ACKS = "settled-after-acks"  # connectivity: nothing published, settled after acks


class AckRequest(NamedTuple):
    """The normalised acknowledgement request of one signal (a named tuple, as envelopes.Signal)."""

    correlation_id: str
    requested_acks: tuple[str, ...]
    response_required: bool
    timeout_ms: int
    outcome: Outcome
    headers: dict[str, Any]

    @property
    def timeout_zero(self) -> bool:
        return self.timeout_ms == 0


def check_api(api: str) -> Api:
    """``api`` selects an outcome table; anything else is a programming error."""
    if api not in APIS:
        raise ValueError(f"api must be one of {', '.join(APIS)}, not {api!r}")
    return api  # type: ignore[return-value]


def normalize(
    raw_headers: object,
    *,
    channel: labels.Channel,
    api: Api,
    settings: Settings = Settings(),
    new_correlation_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> AckRequest:
    """Apply B.7 steps A–D (and the WebSocket rule) to ``raw_headers``; raise DittoError if invalid."""
    check_api(api)
    if type(raw_headers) is not dict and not isinstance(raw_headers, Mapping):
        raise errors.json_field_invalid("/headers", "JSON object")
    headers = lowered(raw_headers)
    headers.pop(WEAK_ACK, None)

    correlation_id = _correlation_id(headers.get(CORRELATION_ID), new_correlation_id)
    shape = _shape(headers.get(RESPONSE_REQUIRED), headers.get(TIMEOUT), headers.get(REQUESTED_ACKS),
                   channel, api, settings)
    headers[CORRELATION_ID] = correlation_id
    headers[REQUESTED_ACKS] = list(shape.acks)
    headers[RESPONSE_REQUIRED] = shape.response_required
    if not shape.timeout_as_given:
        headers[TIMEOUT] = f"{shape.timeout_ms}ms"  # defaulted or capped: record the effective timeout
    return AckRequest(correlation_id, shape.acks, shape.response_required, shape.timeout_ms, shape.outcome, headers)


class _Shape(NamedTuple):
    """What a request's other headers decide, whatever its correlation id."""

    acks: tuple[str, ...]
    response_required: bool
    timeout_ms: int
    timeout_as_given: bool  # the timeout is the header's (not defaulted or capped)
    outcome: Outcome


def _decide_shape(
    rr_value: object, timeout_value: object, acks_value: object, channel: labels.Channel, api: Api, settings: Settings
) -> _Shape:
    """B.7 steps A–D and the WebSocket rule, given the three headers' values."""
    explicit_rr = _boolean(RESPONSE_REQUIRED, rr_value)
    timeout_ms, timeout_as_given = _timeout_ms(timeout_value, api, settings)
    timeout_zero = timeout_ms == 0
    explicit_acks = _requested_acks(acks_value)

    rr = True if explicit_rr is None else explicit_rr  # read as Ditto reads it: true when absent
    acks = _step_a_defaults(explicit_acks, channel=channel, rr=rr, timeout_zero=timeout_zero)
    acks = _step_b_drop_foreign_builtins(acks, channel)
    response_required = (not timeout_zero) if explicit_rr is None else explicit_rr  # step C
    if timeout_zero and (response_required or acks):  # step D
        raise errors.timeout_zero_with_response()
    if api == "websocket" and not response_required and acks:
        raise errors.websocket_acks_without_response()
    return _Shape(acks, response_required, timeout_ms, timeout_as_given,
                  outcome(api, response_required=response_required, has_acks=bool(acks)))


# Most signals request alike: a batch decides each shape once (a fifth of normalize's time).
_SHAPES: dict[tuple[object, ...], _Shape] = {}
_MAX_SHAPES = 1024
_MAX_KEY_CHARS = 256  # longer header values are decided afresh each time (never held)
_KEYED_FLAGS = (type(None), bool, str)  # the types of value a shape is remembered for
_KEYED_TIMEOUTS = (type(None), str, int)


def _shape(
    rr_value: object, timeout_value: object, acks_value: object, channel: labels.Channel, api: Api, settings: Settings
) -> _Shape:
    """:func:`_decide_shape`'s answer, remembered for values of the types a valid header has (of
    those, no two of different types are equal: Python's ``True == 1`` and ``5 == 5.0`` cannot
    meet). An error is never remembered: it is raised again, from the values as given."""
    key = _shape_key(rr_value, timeout_value, acks_value)
    if key is None:
        return _decide_shape(rr_value, timeout_value, acks_value, channel, api, settings)
    key += (channel, api, settings.default_timeout_ms, settings.max_timeout_ms)
    shape = _SHAPES.get(key)
    if shape is None:
        shape = _decide_shape(rr_value, timeout_value, acks_value, channel, api, settings)
        if len(_SHAPES) >= _MAX_SHAPES:
            _SHAPES.clear()
        _SHAPES[key] = shape
    return shape


def _shape_key(rr_value: object, timeout_value: object, acks_value: object) -> tuple[object, ...] | None:
    """The three values, a list of labels as a tuple; None for values of any other type (those
    are decided afresh, and are mostly errors)."""
    if type(acks_value) is list:
        try:
            "".join(acks_value)  # every item a string, so hashable (any other item is refused anyway)
        except TypeError:
            return None
        acks_value = tuple(acks_value)
    elif acks_value is not None and type(acks_value) is not str:
        return None
    if type(rr_value) not in _KEYED_FLAGS or type(timeout_value) not in _KEYED_TIMEOUTS:
        return None
    if _chars(acks_value) + _chars(rr_value) + _chars(timeout_value) > _MAX_KEY_CHARS:
        return None  # a sender's long text is not kept: the remembered shapes stay a few hundred kB
    return rr_value, timeout_value, acks_value


def _chars(value: object) -> int:
    if type(value) is str:
        return len(value)
    return sum(map(len, value)) if type(value) is tuple else 0


def lowered(raw_headers: Mapping[Any, Any]) -> dict[str, Any]:
    """Header names are case-insensitive: the headers by lower-case name (of names that differ in
    case only, the last one's value)."""
    return {str(name).lower(): value for name, value in raw_headers.items()}


def correlation_id_given(raw_headers: Mapping[Any, Any]) -> Any:
    """The correlation-id header's value as :func:`normalize` reads it; None when there is none
    (normalize then makes one up). Lets a batch look its correlation ids up before normalising."""
    return lowered(raw_headers).get(CORRELATION_ID)


def outcome(api: Api, *, response_required: bool, has_acks: bool) -> Outcome:
    """The per-API outcome of a valid request with a positive timeout (B.7, A.2.3)."""
    if api == "http":
        if not response_required:
            return Outcome.ACCEPTED_AFTER_ACKS if has_acks else Outcome.ACCEPTED
        return Outcome.AGGREGATED if has_acks else Outcome.RESPONSE
    if api == "websocket":
        if not response_required:
            return Outcome.NO_RESPONSE  # with acks it was rejected by normalize()
        return Outcome.AGGREGATED if has_acks else Outcome.RESPONSE
    if not response_required:
        return Outcome.SETTLED_AFTER_ACKS if has_acks else Outcome.SETTLED_AT_ONCE
    return Outcome.AGGREGATED if has_acks else Outcome.RESPONSE


def starts_aggregation(channel: labels.Channel, requested_acks: tuple[str, ...]) -> bool:
    """B.7 step E: is any requested label one this channel's aggregator waits for?"""
    ignored = labels.LIVE_RESPONSE if channel == "twin" else labels.TWIN_PERSISTED
    return any(label != ignored for label in requested_acks)


def implicit_label(channel: labels.Channel) -> str:
    return labels.TWIN_PERSISTED if channel == "twin" else labels.LIVE_RESPONSE


# --- steps -----------------------------------------------------------------------------


def _step_a_defaults(
    explicit: tuple[str, ...] | None, *, channel: labels.Channel, rr: bool, timeout_zero: bool
) -> tuple[str, ...]:
    if explicit is None:
        return (implicit_label(channel),) if rr and not timeout_zero else ()
    if channel == "twin":
        return explicit  # twin modify commands do not bind requested-acks to response-required
    if not rr:
        return tuple(label for label in explicit if label != labels.LIVE_RESPONSE)
    if explicit and labels.LIVE_RESPONSE not in explicit:
        return explicit + (labels.LIVE_RESPONSE,)
    return explicit  # an explicit [] disables the implicit live-response


def _step_b_drop_foreign_builtins(acks: tuple[str, ...], channel: labels.Channel) -> tuple[str, ...]:
    foreign = labels.foreign_builtins(channel)
    if foreign.isdisjoint(acks):
        return acks
    return tuple(label for label in acks if label not in foreign)


# --- header value parsers --------------------------------------------------------------


def _correlation_id(value: object, new_correlation_id: Callable[[], str]) -> str:
    if value is None:
        return new_correlation_id()
    if not isinstance(value, str) or not value.strip():
        raise errors.header_invalid_type(CORRELATION_ID, _display(value), "non-empty String")
    return limits.check_correlation_id(value)


def _boolean(name: str, value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise errors.header_invalid_type(name, _display(value), "boolean")


def _timeout_ms(value: object, api: Api, settings: Settings) -> tuple[int, bool]:
    """The effective timeout, and whether it is the one the header gave (not defaulted or capped)."""
    if value is None:
        return settings.default_timeout_ms, False
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise errors.header_invalid_type(TIMEOUT, _display(value), "duration")
    timeout_ms = parse_duration_ms(value if isinstance(value, str) else errors.shown(value))
    if timeout_ms <= settings.max_timeout_ms:
        return timeout_ms, True
    if api == "http":
        raise errors.timeout_out_of_bounds(timeout_ms, settings.max_timeout_ms)
    return settings.max_timeout_ms, False  # WebSocket and connectivity are capped silently, as in Ditto


def _requested_acks(value: object) -> tuple[str, ...] | None:
    """Parse ``requested-acks`` given as a JSON array, its text, or a comma-separated string."""
    if value is None:
        return None
    if isinstance(value, str):
        items = requested_acks_text_items(value)
    elif isinstance(value, list):
        items = value
    else:
        raise errors.header_invalid_type(REQUESTED_ACKS, _display(value), "JSON array")
    parsed: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise errors.header_invalid(
                f"JSON array for <{REQUESTED_ACKS}> contained invalid acknowledgement labels."
            )
        if not labels.is_valid_label(item):
            raise errors.header_invalid_type(REQUESTED_ACKS, _display(value), "JSON array of acknowledgement labels")
        if item not in parsed:  # Ditto keeps acknowledgement requests as a set
            parsed.append(item)
    return tuple(parsed)


def requested_acks_text_items(text: str, name: str = REQUESTED_ACKS) -> list[Any]:
    """The items of ``requested-acks`` (or of ``name``, a WebSocket's ``declared-acks``: B.3) given
    as text: a JSON array, or comma-separated labels."""
    if text.lstrip().startswith("["):
        try:
            value = json.loads(text, parse_int=numbers.parse_int)
        except (ValueError, RecursionError):  # not JSON, a number out of range, nesting too deep
            value = None
        if not isinstance(value, list):
            raise errors.header_invalid_type(name, text, "JSON array")
        return value
    return [part.strip() for part in text.split(",") if part.strip()]


def _display(value: object) -> str:
    """A header value as Ditto shows it in messages: strings as they are, JSON compactly."""
    if isinstance(value, str):
        return value
    return errors.shown(value, limit=10_000)
