"""B.7: header normalisation steps A–E and the per-API outcome tables, row by row."""

import pytest

from ackstore.rules import headers
from ackstore.rules.errors import DittoError
from ackstore.rules.headers import Outcome

TWIN, LIVE = "twin", "live"

STEPS = [
    # (row, channel, raw headers, expected requested-acks, expected response-required)
    ("A absent, rr, twin → [twin-persisted]", TWIN, {}, ("twin-persisted",), True),
    ("A absent, rr, live → [live-response]", LIVE, {}, ("live-response",), True),
    ("A absent, !rr → []", TWIN, {"response-required": False}, (), False),
    ("A absent, !rr live → []", LIVE, {"response-required": "false"}, (), False),
    ("A absent, timeout zero → []", TWIN, {"timeout": "0"}, (), False),
    ("A present twin, rr: unchanged", TWIN, {"requested-acks": ["my:ack"]}, ("my:ack",), True),
    (
        "A present twin, !rr: unchanged",
        TWIN,
        {"requested-acks": ["twin-persisted", "my:ack"], "response-required": False},
        ("twin-persisted", "my:ack"),
        False,
    ),
    ("A present twin, []: stays empty", TWIN, {"requested-acks": []}, (), True),
    ("A present live, rr, non-empty: add live-response", LIVE, {"requested-acks": ["my:ack"]}, ("my:ack", "live-response"), True),
    (
        "A present live, rr, already has live-response",
        LIVE,
        {"requested-acks": ["live-response", "my:ack"]},
        ("live-response", "my:ack"),
        True,
    ),
    (
        "A present live, !rr: remove live-response",
        LIVE,
        {"requested-acks": ["live-response", "my:ack"], "response-required": False},
        ("my:ack",),
        False,
    ),
    ("A present live, rr, []: stays empty", LIVE, {"requested-acks": []}, (), True),
    (
        "B twin drops live-response silently",
        TWIN,
        {"requested-acks": ["live-response", "twin-persisted"]},
        ("twin-persisted",),
        True,
    ),
    (
        "B twin keeps search-persisted",
        TWIN,
        {"requested-acks": ["search-persisted"]},
        ("search-persisted",),
        True,
    ),
    (
        "B live drops twin-persisted and search-persisted silently",
        LIVE,
        {"requested-acks": ["twin-persisted", "search-persisted", "my:ack"]},
        ("my:ack", "live-response"),
        True,
    ),
    ("C rr absent, acks empty, timeout > 0 → true", TWIN, {"requested-acks": []}, (), True),
    ("C rr absent, timeout zero → false", LIVE, {"timeout": "0"}, (), False),
    ("C rr explicit false stays false", TWIN, {"response-required": False, "requested-acks": ["a:b"]}, ("a:b",), False),
]


@pytest.mark.parametrize(("row", "channel", "raw", "acks", "rr"), STEPS, ids=[row[0] for row in STEPS])
def test_normalisation_steps(row: str, channel: str, raw: dict, acks: tuple, rr: bool) -> None:
    request = headers.normalize(raw, channel=channel, api="http")
    assert request.requested_acks == acks
    assert request.response_required is rr
    assert request.headers["requested-acks"] == list(acks)
    assert request.headers["response-required"] is rr


STEP_E = [
    (TWIN, ("twin-persisted",), True),
    (TWIN, ("search-persisted",), True),
    (TWIN, ("live-response",), False),
    (TWIN, (), False),
    (LIVE, ("live-response",), True),
    (LIVE, ("my:ack",), True),
    (LIVE, ("twin-persisted",), False),
    (LIVE, (), False),
]


@pytest.mark.parametrize(("channel", "acks", "starts"), STEP_E)
def test_step_e_starts_aggregation(channel: str, acks: tuple, starts: bool) -> None:
    assert headers.starts_aggregation(channel, acks) is starts


# B.7 outcome table: (rr, acks, timeout) rows; "0 or >0" of the first row is split in two.
ROWS = [
    (False, False, "0"),
    (False, False, "10s"),
    (False, True, "0"),
    (False, True, "10s"),
    (True, False, "0"),
    (True, False, "10s"),
    (True, True, "0"),
    (True, True, "10s"),
]
ZERO = "zero-timeout error"
WS_ERROR = "websocket error"
OUTCOMES = {
    "http": [Outcome.ACCEPTED, Outcome.ACCEPTED, ZERO, Outcome.ACCEPTED_AFTER_ACKS, ZERO, Outcome.RESPONSE, ZERO, Outcome.AGGREGATED],
    "websocket": [Outcome.NO_RESPONSE, Outcome.NO_RESPONSE, ZERO, WS_ERROR, ZERO, Outcome.RESPONSE, ZERO, Outcome.AGGREGATED],
    "connectivity": [
        Outcome.SETTLED_AT_ONCE,
        Outcome.SETTLED_AT_ONCE,
        ZERO,
        Outcome.SETTLED_AFTER_ACKS,
        ZERO,
        Outcome.RESPONSE,
        ZERO,
        Outcome.AGGREGATED,
    ],
}
OUTCOME_CASES = [
    (api, rr, has_acks, timeout, expected)
    for api, expectations in OUTCOMES.items()
    for (rr, has_acks, timeout), expected in zip(ROWS, expectations, strict=True)
]


@pytest.mark.parametrize(("api", "rr", "has_acks", "timeout", "expected"), OUTCOME_CASES)
@pytest.mark.parametrize("channel", [TWIN, LIVE])
def test_outcome_tables(api: str, rr: bool, has_acks: bool, timeout: str, expected: object, channel: str) -> None:
    raw = {"response-required": rr, "requested-acks": ["my:ack"] if has_acks else [], "timeout": timeout}
    if expected in (ZERO, WS_ERROR):
        with pytest.raises(DittoError) as raised:
            headers.normalize(raw, channel=channel, api=api)
        assert raised.value.status == 400 and raised.value.error == "header.invalid"
        if expected == WS_ERROR:
            assert raised.value.message == (
                "For WebSocket, it is forbidden to request acknowledgements while "
                "'response-required' is set to false."
            )
        else:
            assert raised.value.message.startswith("The value of the header 'timeout' must not be zero")
        return
    assert headers.normalize(raw, channel=channel, api=api).outcome is expected


REQUESTED_ACKS_FORMS = [
    (["a:b", "c:d"], ("a:b", "c:d")),
    ('["a:b","c:d"]', ("a:b", "c:d")),
    (" [\"a:b\"] ", ("a:b",)),
    ("a:b,c:d", ("a:b", "c:d")),
    ("a:b, c:d ,", ("a:b", "c:d")),
    ("", ()),
    ("[]", ()),
    (["a:b", "a:b"], ("a:b",)),  # a set, as in Ditto
]


@pytest.mark.parametrize(("value", "parsed"), REQUESTED_ACKS_FORMS)
def test_requested_acks_as_json_array_or_comma_separated(value: object, parsed: tuple) -> None:
    assert headers.normalize({"requested-acks": value}, channel=TWIN, api="http").requested_acks == parsed


INVALID_HEADERS = [
    # (headers, message) — all 400 header.invalid
    ({"requested-acks": "[not json"}, "The value '[not json' of the header 'requested-acks' is not a valid JSON array."),
    ({"requested-acks": '[{"a": 1}'}, "The value '[{\"a\": 1}' of the header 'requested-acks' is not a valid JSON array."),
    (
        {"requested-acks": '{"a": 1}'},
        "The value '{\"a\": 1}' of the header 'requested-acks' is not a valid JSON array of acknowledgement labels.",
    ),
    ({"requested-acks": 5}, "The value '5' of the header 'requested-acks' is not a valid JSON array."),
    ({"requested-acks": [1]}, "JSON array for <requested-acks> contained invalid acknowledgement labels."),
    ({"requested-acks": [None]}, "JSON array for <requested-acks> contained invalid acknowledgement labels."),
    (
        {"requested-acks": ["ab"]},
        "The value '[\"ab\"]' of the header 'requested-acks' is not a valid JSON array of acknowledgement labels.",
    ),
    (
        {"requested-acks": "ok:label,'; drop table signals"},
        "The value 'ok:label,'; drop table signals' of the header 'requested-acks' is not a valid JSON array "
        "of acknowledgement labels.",
    ),
    ({"response-required": "maybe"}, "The value 'maybe' of the header 'response-required' is not a valid boolean."),
    ({"response-required": 1}, "The value '1' of the header 'response-required' is not a valid boolean."),
    ({"response-required": "True"}, "The value 'True' of the header 'response-required' is not a valid boolean."),
    ({"timeout": True}, "The value 'true' of the header 'timeout' is not a valid duration."),
    ({"timeout": ["5s"]}, "The value '[\"5s\"]' of the header 'timeout' is not a valid duration."),
    ({"correlation-id": 5}, "The value '5' of the header 'correlation-id' is not a valid non-empty String."),
    ({"correlation-id": ""}, "The value '' of the header 'correlation-id' is not a valid non-empty String."),
]


@pytest.mark.parametrize(("raw", "message"), INVALID_HEADERS)
@pytest.mark.parametrize("api", headers.APIS)
def test_invalid_header_values(raw: dict, message: str, api: str) -> None:
    with pytest.raises(DittoError) as raised:
        headers.normalize(raw, channel=TWIN, api=api)
    assert raised.value.status == 400
    assert raised.value.error == "header.invalid"
    assert raised.value.message == message


def test_header_names_are_case_insensitive() -> None:
    request = headers.normalize({"Requested-Acks": ["a:b"], "Response-Required": "false"}, channel=TWIN, api="http")
    assert request.requested_acks == ("a:b",) and request.response_required is False


def test_correlation_id_kept_or_generated() -> None:
    assert headers.normalize({"correlation-id": "c-1"}, channel=TWIN, api="http").correlation_id == "c-1"
    generated = headers.normalize({}, channel=TWIN, api="http", new_correlation_id=lambda: "fresh")
    assert generated.correlation_id == "fresh" and generated.headers["correlation-id"] == "fresh"


def test_clients_cannot_fake_a_weak_ack_header() -> None:
    request = headers.normalize({"ditto-weak-ack": True}, channel=TWIN, api="http")
    assert "ditto-weak-ack" not in request.headers


def test_headers_must_be_an_object() -> None:
    with pytest.raises(DittoError) as raised:
        headers.normalize(["timeout", "5"], channel=TWIN, api="http")
    assert raised.value.status == 400


def test_unknown_api_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        headers.normalize({}, channel=TWIN, api="grpc")


def test_a_long_header_value_is_decided_but_not_held() -> None:
    """normalize remembers a request's shape only for short header values: a sender's long
    requested-acks is decided afresh (the same answer) and never kept."""
    labels_text = ",".join(f"conn:label-{n}" for n in range(60))
    headers._SHAPES.clear()
    first = headers.normalize({"requested-acks": labels_text}, channel="twin", api="connectivity")
    again = headers.normalize({"requested-acks": labels_text}, channel="twin", api="connectivity")
    assert first.requested_acks == again.requested_acks and len(first.requested_acks) == 60
    assert len(labels_text) > headers._MAX_KEY_CHARS and headers._SHAPES == {}
    headers.normalize({"requested-acks": "conn:a,conn:b"}, channel="twin", api="connectivity")
    assert len(headers._SHAPES) == 1  # a short one is remembered
