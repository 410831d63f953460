"""Invariants of the pure rules, under random input (hypothesis)."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ackstore.rules import aggregation, envelopes, errors, headers, labels
from ackstore.rules.acks import Ack
from ackstore.rules.errors import DittoError
from ackstore.rules.settings import Settings

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=10,
)
label_like = st.one_of(
    st.sampled_from(sorted(labels.BUILTIN_LABELS) + ["my:ack", "conn:x", "ab", "a.b", "{{connection:id}}:abc"]),
    st.text(max_size=12),
)
durations = st.one_of(
    st.from_regex(r"[+-]?[0-9]{1,25}(ms|mo|s|m|h|d|w|y)?", fullmatch=True),
    st.text(max_size=8),
    st.integers(min_value=-(10**20), max_value=10**20),
)
header_values = {
    "requested-acks": st.one_of(
        st.lists(label_like, max_size=4), st.lists(json_scalars, max_size=3), st.text(max_size=30), json_scalars
    ),
    "response-required": st.one_of(st.booleans(), st.sampled_from(["true", "false", "True", "yes", ""]), json_scalars),
    "timeout": st.one_of(durations, json_scalars),
    "correlation-id": st.one_of(st.text(max_size=10), json_scalars),
    "ditto-weak-ack": json_values,
    "x-custom": json_values,
}
raw_headers = st.fixed_dictionaries({}, optional=header_values)


@settings(max_examples=600, deadline=None)
@given(raw=raw_headers, channel=st.sampled_from(["twin", "live"]), api=st.sampled_from(headers.APIS))
def test_normaliser_raises_only_ditto_errors_and_keeps_its_invariants(raw: dict, channel: str, api: str) -> None:
    config = Settings()
    try:
        request = headers.normalize(raw, channel=channel, api=api, settings=config)
    except DittoError as error:
        assert 400 <= error.status < 500
        assert set(error.to_json()) >= {"status", "error", "message", "description"}
        return
    assert 0 <= request.timeout_ms <= config.max_timeout_ms
    assert all(labels.is_valid_label(label) for label in request.requested_acks)
    assert not set(request.requested_acks) & labels.foreign_builtins(channel)
    assert len(set(request.requested_acks)) == len(request.requested_acks)
    assert not (request.timeout_zero and (request.response_required or request.requested_acks))
    if api == "websocket":
        assert request.response_required or not request.requested_acks
    assert "ditto-weak-ack" not in request.headers


def _normalized(raw: dict, channel: str, api: str, config: Settings) -> object:
    try:
        return headers.normalize(raw, channel=channel, api=api, settings=config, new_correlation_id=lambda: "new")
    except DittoError as error:
        return error.to_json()


# Values that are equal in Python but not as headers (True and 1, 0 and False, 5 and 5.0).
ALIKE = {
    "response-required": [True, 1, "true", False, 0, "false", 1.0],
    "timeout": ["5s", 5, 5.0, True, "0", 0, False, 0.0, "99999m", "1s"],
    "requested-acks": [[], ["twin-persisted"], "twin-persisted", ["twin-persisted", 1], [True], [1],
                       '["twin-persisted"]', ["live-response"], ("twin-persisted",), [["twin-persisted"]], [{}]],
}


@st.composite
def alike_requests(draw: st.DrawFn) -> list:
    """A request, then requests that differ from it by one such value each (same channel and API)."""
    base = draw(st.fixed_dictionaries({}, optional={name: st.sampled_from(values) for name, values in ALIKE.items()}))
    channel, api = draw(st.sampled_from(["twin", "live"])), draw(st.sampled_from(headers.APIS))
    requests = [(base, channel, api)]
    for name in draw(st.lists(st.sampled_from(sorted(ALIKE)), min_size=1, max_size=5)):
        requests.append(({**base, name: draw(st.sampled_from(ALIKE[name]))}, channel, api))
    return requests


@settings(max_examples=600, deadline=None)
@given(
    requests=st.one_of(alike_requests(), st.lists(st.tuples(raw_headers, st.sampled_from(["twin", "live"]),
                                                            st.sampled_from(headers.APIS)), min_size=1, max_size=6)),
    config=st.sampled_from([Settings(), Settings(default_timeout_ms=1_000, max_timeout_ms=60_000)]),
)
def test_a_remembered_request_shape_answers_as_a_fresh_decision(requests: list, config: Settings) -> None:
    """normalize remembers what the shaping headers decide (most signals request alike): every
    request, after any others were remembered, is answered exactly as with nothing remembered —
    the same request or the same error, word for word (True and 1, "5" and 5 are not alike)."""
    remembered = [_normalized(raw, channel, api, config) for raw, channel, api in requests]
    again = [_normalized(raw, channel, api, config) for raw, channel, api in requests]
    fresh = []
    for raw, channel, api in requests:
        headers._SHAPES.clear()
        fresh.append(_normalized(raw, channel, api, config))
    assert remembered == fresh
    assert again == fresh


@settings(max_examples=400, deadline=None)
@given(envelope=st.dictionaries(st.sampled_from(["topic", "path", "value", "headers", "status"]), json_values))
def test_envelope_parsers_raise_only_ditto_errors(envelope: dict) -> None:
    for parse in (envelopes.parse_signal, envelopes.parse_acknowledgement):
        try:
            parse(envelope)
        except DittoError as error:
            assert 400 <= error.status < 500


topics = st.builds(
    "{}/{}/things/{}/{}/{}".format,
    st.sampled_from(["org.acme", "", "1bad"]),
    st.sampled_from(["t1", "x"]),
    st.sampled_from(["twin", "live", "other"]),
    st.sampled_from(["commands", "messages", "acks", "events"]),
    st.sampled_from(["modify", "create", "merge", "delete", "retrieve", "my:ack", "twin-persisted", ""]),
)


@settings(max_examples=400, deadline=None)
@given(topic=topics, path=st.one_of(st.just("/"), st.text(max_size=5)), status=json_scalars, value=json_values)
def test_envelope_parsers_on_plausible_topics(topic: str, path: str, status: object, value: object) -> None:
    envelope = {"topic": topic, "path": path, "status": status, "value": value, "headers": {"correlation-id": "c"}}
    for parse in (envelopes.parse_signal, envelopes.parse_acknowledgement):
        try:
            parse(envelope)
        except DittoError as error:
            assert 400 <= error.status < 500


ack_labels = st.sampled_from(["a:one", "a:two", "a:three", "twin-persisted", "search-persisted"])
statuses = st.sampled_from([200, 201, 204, 302, 400, 404, 408, 412, 424, 500])


@settings(max_examples=400, deadline=None)
@given(
    requested=st.lists(ack_labels, min_size=1, max_size=4, unique=True),
    received=st.lists(st.builds(Ack, label=ack_labels, status=statuses), max_size=8),
    deadline_passed=st.booleans(),
    rr=st.booleans(),
)
def test_aggregation_invariants(requested: list, received: list, deadline_passed: bool, rr: bool) -> None:
    request = aggregation.Request("c", tuple(requested), rr, 10_000)
    result = aggregation.decide(request, acks=received, deadline_passed=deadline_passed)
    collected = aggregation.collect(requested, received)
    if result is None:
        assert not deadline_passed and len(collected) < len(requested)
        return
    first = {}
    for ack in received:
        first.setdefault(ack.label, ack)
    assert all(collected[label] is first[label] for label in collected)  # first per label wins
    if rr and len(requested) == 1 and requested[0] == "twin-persisted":
        return  # the built-in shortcut answers with the plain response
    complete = [collected.get(l) or aggregation.timeout_placeholder(l, 10_000, "c") for l in requested]
    statuses_ = [ack.status for ack in complete]
    if not rr and all(200 <= s < 300 for s in statuses_):
        assert result.status == 202
    elif len(complete) == 1:
        assert result.status == statuses_[0]
    else:
        assert result.status == (200 if all(200 <= s < 300 for s in statuses_) else 424)


# --- the front door's fast path accepts only what the full checks accept ------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)
_json_texts = st.one_of(
    st.builds(lambda v, ascii_only: json.dumps({"v": v}, ensure_ascii=ascii_only), _json_values, st.booleans()),
    st.sampled_from(['{"a": NaN}', '{"a": 1e999}', '{"a": "\\ud800"}', '{"a": "\\u0000"}', '{"a": -Infinity}',
                     '{"a": 1e15}', "[1]", '{"a": "\\u00e9"}']),
    st.text(max_size=30),
)


@given(text=_json_texts, as_bytes=st.booleans())
def test_the_fast_path_of_load_envelope_accepts_only_what_the_full_checks_accept(text: str, as_bytes: bool) -> None:
    raw = text.encode("utf-8", "surrogatepass") if as_bytes else text
    size = len(text.encode("utf-8", "surrogatepass"))
    fast = envelopes._plain_json_object(raw, size, 1024 * 1024)
    if fast is None:
        return
    assert fast == json.loads(text)
    try:
        assert envelopes.canonical_json(fast)  # the full path's checks pass on what the fast path took
    except DittoError as error:  # pragma: no cover — would be a bug of the fast path
        raise AssertionError(f"fast path accepted what the full path rejects: {error}") from None


@given(text=_json_texts | st.sampled_from(['{"a": 1, "a": 2}', '{"h": {"x": 1, "x": 1}}', '{"a":"b\\"c"}']),
       as_bytes=st.booleans())
def test_a_senders_text_parses_to_what_the_full_parse_gives_or_fails_as_it_does(text: str, as_bytes: bool) -> None:
    """envelopes.parse_text (a connector's message body: msgspec's fast path when plain) against
    the full parse alone: the same value, or the same 400 with the same description."""
    raw = text.encode("utf-8", "surrogatepass") if as_bytes else text
    try:
        expected: object = errors.parse_json_text(raw)
    except DittoError as error:
        expected = error.to_json()
    try:
        got: object = envelopes.parse_text(raw, 1024 * 1024)
    except DittoError as error:
        got = error.to_json()
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


@given(value=json_values | st.sampled_from(["\x00", "a\ud800", "é☃\U0001f600\x1b", 10 ** 17, 10 ** 400, ["\ud800"]]))
def test_a_canonical_size_bound_holds_and_is_given_only_for_what_canonical_json_takes(value: object) -> None:
    """What a connector's reader adds to a message is bounded, not encoded (issue 51): when
    envelopes.canonical_size_bound gives a bound, the full encoding takes the value within it."""
    bound = envelopes.canonical_size_bound(value)
    if bound is not None:
        assert len(envelopes.canonical_json(value).encode()) <= bound
