"""B.9's HTTP push row as pure rules: a target's address, the label's status, and the ack's value
from what an endpoint chose to answer — at and past the size kept."""

from __future__ import annotations

import pytest

from ackstore.rules import http_push


@pytest.mark.parametrize(("address", "parsed"), [
    ("POST:/events", ("POST", "/events")), ("GET:/", ("GET", "/")), ("PATCH:/a/b?x=1", ("PATCH", "/a/b?x=1")),
])
def test_a_target_address_is_its_method_and_path(address: str, parsed: tuple[str, str]) -> None:
    assert http_push.parse_address(address) == parsed


@pytest.mark.parametrize("address", ["/events", "post:/events", "SEND:/e", "POST:e", "POST:/a b", "POST:/\r\nX: y",
                                     "POST:/{{ thing:id }}", None, 7])
def test_an_address_that_is_no_verb_and_path_is_refused(address: object) -> None:
    with pytest.raises(ValueError):
        http_push.parse_address(address)


@pytest.mark.parametrize(("status", "timed_out", "issued"), [
    (200, False, 200), (404, False, 404), (503, False, 503), (None, True, 408), (None, False, 500),
])
def test_the_label_is_the_status_else_408_or_500(status: int | None, timed_out: bool, issued: int) -> None:
    assert http_push.issued_status(status, timed_out) == issued


def test_a_body_at_the_size_kept_is_the_value_and_one_past_it_is_none() -> None:
    at = b'"' + b"x" * (http_push.MAX_BODY_BYTES - 2) + b'"'
    assert http_push.ack_value("application/json", at) == "x" * (http_push.MAX_BODY_BYTES - 2)
    assert http_push.ack_value("application/json", at + b" ") is None
    assert http_push.ack_value("text/plain", b"\xff\xfe") == "//4="  # no UTF-8: base64
    assert http_push.ack_value("text/plain", b'{"a": 1}') == {"a": 1}  # JSON whatever its type says
    assert http_push.ack_value("application/json", b"{broken") == "{broken"
    assert http_push.ack_value(None, b"") is None


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
