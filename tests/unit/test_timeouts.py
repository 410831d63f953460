"""B.6 and A.2.2: the timeout header's syntax, bounds, defaults and the zero-timeout rule."""

import pytest

from ackstore.rules import headers
from ackstore.rules.durations import parse_duration_ms
from ackstore.rules.errors import DittoError
from ackstore.rules.settings import Settings

DURATIONS = [
    ("5", 5_000),  # a bare number means seconds
    ("0", 0),
    ("+5", 5_000),
    ("250ms", 250),
    ("42s", 42_000),
    ("2m", 120_000),
    ("1h", 3_600_000),
    ("1d", 86_400_000),
    ("1w", 604_800_000),
    ("1mo", 2_629_746_000),
    ("1y", 31_556_952_000),
    ("007s", 7_000),
]


@pytest.mark.parametrize(("text", "ms"), DURATIONS)
def test_duration_units(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


INVALID_DURATIONS = [
    ("", 'For input string: ""'),
    ("abc", 'For input string: "abc"'),
    ("5x", 'For input string: "5x"'),
    ("5 s", 'For input string: "5 s"'),
    (" 5", 'For input string: " 5"'),
    ("1.5s", 'For input string: "1.5s"'),
    ("s", 'For input string: "s"'),
    ("--5", 'For input string: "--5"'),
    ("٥", 'For input string: "٥"'),  # a non-ASCII digit
    ("99999999999999999999s", 'For input string: "99999999999999999999"'),
    ("-5", "The duration must not be negative but was <-5>!"),
    ("-5s", "The duration must not be negative but was <-5s>!"),
    ("-1ms", "The duration must not be negative but was <-1ms>!"),
]


@pytest.mark.parametrize(("text", "message"), INVALID_DURATIONS)
def test_invalid_durations_are_400_timeout_invalid(text: str, message: str) -> None:
    with pytest.raises(DittoError) as raised:
        parse_duration_ms(text)
    assert raised.value.to_json() == {
        "status": 400,
        "error": "timeout.invalid",
        "message": message,
        "description": "Please choose a valid timeout.",
    }


@pytest.mark.parametrize("api", headers.APIS)
def test_default_timeout_is_five_minutes(api: headers.Api) -> None:
    assert headers.normalize({}, channel="twin", api=api).timeout_ms == 300_000


@pytest.mark.parametrize("api", headers.APIS)
def test_the_maximum_itself_is_allowed(api: headers.Api) -> None:
    assert headers.normalize({"timeout": "20m"}, channel="twin", api=api).timeout_ms == 1_200_000


def test_http_rejects_a_timeout_above_the_maximum() -> None:
    with pytest.raises(DittoError) as raised:
        headers.normalize({"timeout": "1200001ms"}, channel="twin", api="http")
    assert raised.value.to_json() == {
        "status": 400,
        "error": "timeout.invalid",
        "message": "The timeout <1,200,001ms> is not inside its allowed bounds <0ms - 1,200,000ms>",
        "description": "Please choose a valid timeout.",
    }


@pytest.mark.parametrize("api", ["websocket", "connectivity"])
@pytest.mark.parametrize("timeout", ["21m", "1h", "1y"])
def test_websocket_and_connectivity_cap_silently(api: headers.Api, timeout: str) -> None:
    request = headers.normalize({"timeout": timeout}, channel="live", api=api)
    assert request.timeout_ms == 1_200_000
    assert request.headers["timeout"] == "1200000ms"


def test_defaults_and_maximum_are_configurable() -> None:
    settings = Settings(default_timeout_ms=30_000, max_timeout_ms=60_000)
    assert headers.normalize({}, channel="twin", api="http", settings=settings).timeout_ms == 30_000
    with pytest.raises(DittoError) as raised:
        headers.normalize({"timeout": "61s"}, channel="twin", api="http", settings=settings)
    assert raised.value.message == "The timeout <61,000ms> is not inside its allowed bounds <0ms - 60,000ms>"


def test_settings_from_environment() -> None:
    settings = Settings.from_env({"ACKSTORE_DEFAULT_TIMEOUT": "90s", "ACKSTORE_MAX_TIMEOUT": "10m"})
    assert (settings.default_timeout_ms, settings.max_timeout_ms) == (90_000, 600_000)


def test_default_above_maximum_is_a_configuration_error() -> None:
    with pytest.raises(ValueError):
        Settings(default_timeout_ms=21 * 60_000)


ZERO_TIMEOUT_MESSAGE = (
    "The value of the header 'timeout' must not be zero if response or acknowledgements are requested."
)

ZERO_TIMEOUT = [
    # (headers besides timeout=0, allowed) — B.6 "Timeout zero"
    ({}, True),  # defaults react: no acks, response-required false
    ({"response-required": False}, True),
    ({"response-required": False, "requested-acks": []}, True),
    ({"response-required": True}, False),
    ({"requested-acks": ["my:ack"]}, False),
    ({"response-required": False, "requested-acks": ["my:ack"]}, False),
]


@pytest.mark.parametrize(("extra", "allowed"), ZERO_TIMEOUT)
@pytest.mark.parametrize("api", headers.APIS)
def test_zero_timeout(extra: dict, allowed: bool, api: headers.Api) -> None:
    raw = {"timeout": "0", **extra}
    if allowed:
        request = headers.normalize(raw, channel="twin", api=api)
        assert request.timeout_ms == 0 and request.requested_acks == () and not request.response_required
        return
    with pytest.raises(DittoError) as raised:
        headers.normalize(raw, channel="twin", api=api)
    assert raised.value.to_json() == {
        "status": 400,
        "error": "header.invalid",
        "message": ZERO_TIMEOUT_MESSAGE,
        "description": "Please provide a positive timeout.",
    }


WHOLE_NUMBER_SETTINGS = [  # (variable, its least value): every whole-number ACKSTORE_* setting
    ("ACKSTORE_MAX_ENVELOPE_BYTES", 1), ("ACKSTORE_MAX_ATTEMPTS", 1), ("ACKSTORE_PARTITIONS", 1),
    ("ACKSTORE_LOCK_TIMEOUT_MS", 1), ("ACKSTORE_IN_DRIVER_ROWS", 0), ("ACKSTORE_MAX_THING_BYTES", 1),
    ("ACKSTORE_METRIC_SOURCES", 0),
]


def _pipeline_settings(monkeypatch: pytest.MonkeyPatch, name: str, value: str):
    from jobs.settings import PipelineSettings

    monkeypatch.setenv(name, value)
    return PipelineSettings.from_env("postgresql://127.0.0.1/ledger")


@pytest.mark.parametrize("name, least", WHOLE_NUMBER_SETTINGS)
@pytest.mark.parametrize("value", ["abc", "", " ", "1.5", "1e3", "0x10", "٣", "-1", "10 000"])
def test_a_whole_number_setting_that_is_none_is_400_naming_it(monkeypatch: pytest.MonkeyPatch, name: str,
                                                               least: int, value: str) -> None:
    with pytest.raises(DittoError) as raised:
        _pipeline_settings(monkeypatch, name, value)
    assert (raised.value.status, raised.value.error) == (400, "ackstore:setting.invalid")
    assert f"<{name}>" in raised.value.message and f"at least {least}" in raised.value.message


@pytest.mark.parametrize("name, least", WHOLE_NUMBER_SETTINGS)
def test_a_whole_number_setting_takes_what_a_user_would_type(monkeypatch: pytest.MonkeyPatch, name: str,
                                                              least: int) -> None:
    field = {"ACKSTORE_MAX_ENVELOPE_BYTES": lambda s: s.rules.max_envelope_bytes,
             "ACKSTORE_MAX_ATTEMPTS": lambda s: s.rules.max_attempts,
             "ACKSTORE_METRIC_SOURCES": lambda s: s.rules.metric_sources}.get(
        name, lambda s: getattr(s, name.removeprefix("ACKSTORE_").lower()))
    for typed, value in ((" 7 ", 7), ("+12", 12), (str(least), least), ("5000", 5000)):
        assert field(_pipeline_settings(monkeypatch, name, typed)) == value
