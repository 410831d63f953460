"""B.9's HTTP push row as pure rules: a target's address, the label's status, and the ack's value
from what an endpoint chose to answer — at and past the size kept."""

from __future__ import annotations

import pytest

from ackstore.rules import envelopes, http_push, jsontext, limits


@pytest.mark.parametrize(("address", "parsed"), [
    ("POST:/events", ("POST", "/events")), ("GET:/", ("GET", "/")), ("PATCH:/a/b?x=1", ("PATCH", "/a/b?x=1")),
])
def test_a_target_address_is_its_method_and_path(address: str, parsed: tuple[str, str]) -> None:
    assert http_push.parse_address(address) == parsed


@pytest.mark.parametrize("address", ["/events", "post:/events", "SEND:/e", "POST:e", "POST:/a b", "POST:/\r\nX: y",
                                     "POST:/{{ thing:id }}", None, 7, "POST:/☃", "POST:/a\x00", "POST:/\x7f",
                                     "POST:/a\tb"])
def test_an_address_that_is_no_verb_and_path_is_refused(address: object) -> None:
    with pytest.raises(ValueError):
        http_push.parse_address(address)


def test_a_path_past_ascii_is_refused_with_its_percent_encoding_named() -> None:
    with pytest.raises(ValueError, match="/%E2%98%83"):
        http_push.parse_address("POST:/☃")
    assert http_push.parse_address("POST:/%E2%98%83") == ("POST", "/%E2%98%83")


@pytest.mark.parametrize(("uri", "parsed"), [
    ("http://127.0.0.1:8080", (False, "127.0.0.1", 8080, "", None, None)),
    ("https://user:p%40ss@example.org/base/", (True, "example.org", 443, "/base", "user", "p@ss")),
    ("http://[::1]:9000/x", (False, "::1", 9000, "/x", None, None)),
    ("http://h", (False, "h", 80, "", None, None)),
])
def test_an_endpoint_is_its_scheme_host_port_base_and_credentials(uri: str, parsed: tuple) -> None:
    assert tuple(http_push.parse_endpoint(uri)) == parsed


@pytest.mark.parametrize(("uri", "problem"), [
    ("http://127.0.0.1:99999", "Port out of range"), ("http://[::1", "Invalid IPv6 URL"), ("http://h:0", "port from 1"),
    ("http://h:abc", "no URL"), ("http://", "needs a host"), ("http:///x", "needs a host"),
    ("http://bücher.example", "IDNA"), ("http://h/☃", "percent-encode"), ("http://h/a b", "percent-encode"),
    ("http://h?x=1", "query or fragment"), ("http://h#f", "query or fragment"), ("ftp://h", "http:// or https://"),
])
def test_an_endpoint_no_request_can_go_to_is_refused_saying_why(uri: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        http_push.parse_endpoint(uri)


@pytest.mark.parametrize(("value", "problem"), [
    ("c-1", None), ("", None), ("a b\tc", None), ("~!#$%&'*+-.^_`|", None), ("x" * 5000, None),
    ("c-☃", "U+2603"), ("é", "U+00E9"), ("c\r\nX-Injected: 1", "U+000D"), ("a\nb", "U+000A"), ("\x1b[2J", "U+001B"),
    ("a\x7f", "U+007F"), ("a\x00", "U+0000"), ("\ud800", "U+D800"), (" lead", "begins or ends with a space"),
    ("trail\t", "begins or ends with a space"),
])
def test_a_header_value_http_cannot_carry_as_it_is_is_refused_naming_the_character(value: str,
                                                                                  problem: str | None) -> None:
    found = http_push.header_problem("correlation-id", value)
    assert found is None if problem is None else (problem in found and "correlation-id" in found)


@pytest.mark.parametrize(("status", "timed_out", "issued"), [
    (200, False, 200), (404, False, 404), (503, False, 503), (599, False, 599), (None, True, 408), (None, False, 500),
    (600, False, 503), (999, False, 503), (101, False, 503), (103, False, 503), (100, False, 503),
])
def test_the_label_is_the_status_else_408_or_500_and_503_for_no_final_status(status: int | None, timed_out: bool,
                                                                              issued: int) -> None:
    assert http_push.issued_status(status, timed_out) == issued


def test_a_status_with_no_final_meaning_is_answered_with_dittos_sending_failure() -> None:
    assert http_push.unknown_status_error(600) == {
        "error": "connectivity:message.sending.failed", "message": "Remote server delivered unknown HTTP status code <600>!",
        "description": "Sending the message to an external system failed, please check if your connection is configured "
                       "properly and the target system is available and consuming messages."}
    message = {"topic": "org.acme/t/things/live/messages/ask", "path": "/inbox/messages/ask",
               "headers": {"correlation-id": "m", "ack-token": "1.x"}}
    command = {"topic": "org.acme/t/things/live/commands/modify", "path": "/attributes/on",
               "headers": {"correlation-id": "c", "ack-token": "2.y"}}
    for signal in (message, command):
        response = http_push.live_response(signal, 999, "application/json", b'{"topic": "x", "status": 999}')
        assert response["status"] == 503 and response["value"]["error"] == "connectivity:message.sending.failed"
        assert response["headers"] == signal["headers"]


def test_a_body_at_the_size_kept_is_the_value_and_one_past_it_is_none() -> None:
    at = b'"' + b"x" * (http_push.MAX_BODY_BYTES - 2) + b'"'
    assert http_push.ack_value("application/json", at) == "x" * (http_push.MAX_BODY_BYTES - 2)
    assert http_push.ack_value("application/json", at + b" ") is None
    assert http_push.ack_value("text/plain", b"\xff\xfe") == "//4="  # no UTF-8: base64
    assert http_push.ack_value("text/plain", b'{"a": 1}') == {"a": 1}  # JSON whatever its type says
    assert http_push.ack_value("application/json", b"{broken") == "{broken"
    assert http_push.ack_value(None, b"") is None


def test_a_body_nesting_deeper_than_a_value_may_is_its_text_so_its_ack_is_taken() -> None:
    """The ack carries the value one level inside its message (decisions #115): a body of the
    message's whole depth would make the ack a 400, and the label a 408."""
    deepest = limits.MAX_VALUE_DEPTH
    within = b"[" * deepest + b"]" * deepest
    past = b"[" * (deepest + 1) + b"]" * (deepest + 1)
    assert jsontext.depth(http_push.ack_value("application/json", within)) == deepest
    assert http_push.ack_value("application/json", past) == past.decode()
    envelope = {"topic": "org.acme/t/things/twin/acks/a:b", "status": 200, "headers": {"correlation-id": "c"},
                "value": http_push.ack_value("application/json", within)}
    envelopes.load_envelope(envelope, 1 << 20)  # the door takes the deepest value kept as JSON


def test_a_live_message_response_is_built_and_a_command_response_answers_its_own_request() -> None:
    message = {"topic": "org.acme/t/things/live/messages/ask", "path": "/inbox/messages/ask",
               "headers": {"correlation-id": "m", "ack-token": "1.x"}}
    assert http_push.live_response(message, 201, "application/json", b'{"ok": true}') == {
        "topic": message["topic"], "path": "/outbox/messages/ask", "status": 201, "value": {"ok": True},
        "headers": {"correlation-id": "m", "ack-token": "1.x"}}
    command = {"topic": "org.acme/t/things/live/commands/modify", "path": "/attributes/on",
               "headers": {"correlation-id": "c", "ack-token": "2.y"}}
    body = b'{"topic": "org.acme/t/things/live/commands/modify", "path": "/attributes/on", "status": 204, ' \
           b'"headers": {"correlation-id": "other", "x": "1"}}'
    answered = http_push.live_response(command, 200, "application/json", body)
    assert answered["headers"] == {"correlation-id": "c", "ack-token": "2.y", "x": "1"} and answered["status"] == 204
