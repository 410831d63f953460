"""Ditto's WebSocket binding in the ledger's terms (rules/ws_protocol.py): control frames and their
``:ACK``, ``declared-acks``, what a frame is, and what a command is answered on the socket."""

from __future__ import annotations

import pytest

from ackstore.rules import errors, headers, subscriptions, wire, ws_protocol
from ackstore.rules.envelopes import parse_signal


@pytest.mark.parametrize(("text", "acked"), [
    ("START-SEND-EVENTS", "START-SEND-EVENTS:ACK"),
    ("STOP-SEND-EVENTS", "STOP-SEND-EVENTS:ACK"),
    ("START-SEND-MESSAGES", "START-SEND-MESSAGES:ACK"),
    ("START-SEND-LIVE-COMMANDS", "START-SEND-LIVE-COMMANDS:ACK"),
    ("STOP-SEND-LIVE-EVENTS", "STOP-SEND-LIVE-EVENTS:ACK"),
    ("START-SEND-EVENTS?filter=eq(attributes%2Fon%2Ctrue)&namespaces=org.acme", "START-SEND-EVENTS:ACK"),
])
def test_a_control_frame_is_acknowledged_with_its_name_and_ack(text: str, acked: str) -> None:
    control = ws_protocol.control(text)
    assert control is not None and control.acknowledged == acked


def test_a_control_frames_parameters_are_url_decoded() -> None:
    control = ws_protocol.control("START-SEND-EVENTS?filter=eq(attributes%2Fon%2Ctrue)&namespaces=org.acme,org.b"
                                  "&extraFields=attributes(model)%2C_revision&unknown=1")
    assert control == ws_protocol.Control(True, "EVENTS", "eq(attributes/on,true)", ("org.acme", "org.b"),
                                          (("attributes", "model"), ("_revision",)))


def test_a_bad_extra_fields_is_dittos_field_selector_error() -> None:
    with pytest.raises(errors.DittoError) as refused:
        ws_protocol.control("START-SEND-EVENTS?extraFields=attributes(model")
    assert (refused.value.status, refused.value.error) == (400, "json.fieldselector.invalid")


@pytest.mark.parametrize(("topic", "stream"), [
    ("org.acme/lamp-1/things/twin/events/modified", "EVENTS"),
    ("org.acme/lamp-1/things/live/messages/ask", "MESSAGES"),
    ("org.acme/lamp-1/things/live/commands/modify", "LIVE_COMMANDS"),
    ("_/_/things/twin/errors", None), ("not a topic", None),
])
def test_a_pushed_signal_is_its_streams(topic: str, stream: str | None) -> None:
    assert ws_protocol.stream_of({"topic": topic}) == stream


def test_a_pushed_signal_carries_what_its_stream_selected_as_extra_and_nothing_when_nothing() -> None:
    message = {"topic": "org.acme/lamp-1/things/twin/events/modified", "value": 1}
    assert ws_protocol.with_extra(message, {"attributes": {"model": "L1"}}) == {**message,
                                                                                "extra": {"attributes": {"model": "L1"}}}
    assert ws_protocol.with_extra(message, {}) == message


@pytest.mark.parametrize("text", ['{"topic": "x"}', "START-SEND-NOTHING", "start-send-events", " START-SEND-EVENTS",
                                  "START-SEND-EVENTS:ACK", ""])
def test_what_is_no_control_frame_is_left_for_the_json_parser(text: str) -> None:
    assert ws_protocol.control(text) is None


def test_a_bad_filter_is_dittos_rql_error() -> None:
    with pytest.raises(errors.DittoError) as refused:
        ws_protocol.control("START-SEND-EVENTS?filter=eq(attributes%2Fon")
    assert (refused.value.status, refused.value.error) == (400, "rql.expression.invalid")


@pytest.mark.parametrize(("given", "labels"), [
    (None, []), ("", []), ("app:done", ["app:done"]), ("app:a, app:b", ["app:a", "app:b"]),
    ('["app:a","app:b"]', ["app:a", "app:b"]),
])
def test_declared_acks_are_comma_separated_or_a_json_array(given, labels) -> None:
    assert ws_protocol.declared_labels(given) == labels


def test_declared_acks_that_are_no_json_array_are_refused_by_their_name() -> None:
    with pytest.raises(errors.DittoError) as refused:
        ws_protocol.declared_labels('["app:a"')
    assert refused.value.error == "header.invalid" and "declared-acks" in refused.value.message


@pytest.mark.parametrize(("envelope", "kind"), [
    ({"topic": "org.acme/lamp/things/twin/acks/app:done", "status": 200}, "ack"),
    ({"topic": "org.acme/lamp/things/twin/acks", "value": {}}, "ack"),
    ({"topic": "org.acme/lamp/things/live/commands/modify", "status": 204}, "response"),
    ({"topic": "org.acme/lamp/things/twin/commands/modify", "path": "/", "value": {}}, "signal"),
])
def test_a_frame_is_an_ack_a_response_or_a_signal(envelope, kind) -> None:
    assert ws_protocol.kind(envelope) == kind


def _asked(**given) -> tuple:
    envelope = {"topic": "org.acme/lamp/things/twin/commands/modify", "path": "/", "value": {},
                "headers": {"correlation-id": "c-1", **given}}
    signal = parse_signal(envelope)
    return signal, headers.normalize(signal.raw_headers, channel="twin", api="websocket")


def test_a_command_that_asks_for_nothing_gets_no_answer_on_the_socket() -> None:
    assert not ws_protocol.answers(_asked(**{"response-required": False})[1])
    assert ws_protocol.answers(_asked()[1])
    with pytest.raises(errors.DittoError) as refused:  # B.7: acks without a response, refused on a socket
        _asked(**{"response-required": False, "requested-acks": ["app:done"]})
    assert "WebSocket" in refused.value.message


def test_the_socket_waits_for_the_deadline_and_two_passes() -> None:
    assert ws_protocol.wait_ms(_asked(timeout="10s")[1]) == 10_000 + ws_protocol.DECISION_MARGIN_MS


def test_a_decision_is_answered_as_a_connection_publishes_it() -> None:
    signal, asked = _asked(**{"requested-acks": ["twin-persisted", "app:done"]})
    body = {"twin-persisted": {"status": 204}, "app:done": {"status": 200}}
    decision = {"status": 200, "body": body, "cause": "acks", "ack_statuses": {"twin-persisted": 204, "app:done": 200}}
    message = ws_protocol.answer(signal, asked, decision)
    assert message == wire.result_message(thing_id="org.acme:lamp", channel="twin", topic=signal.topic, path="/",
                                          correlation_id="c-1", cause="acks", status=200, body=body,
                                          ack_statuses=decision["ack_statuses"])
    assert (message["topic"], message["status"], message["value"]) == ("org.acme/lamp/things/twin/acks", 200, body)


def test_a_plain_response_keeps_the_commands_topic() -> None:
    signal, asked = _asked()
    message = ws_protocol.answer(signal, asked, {"status": 201, "body": {"thingId": "org.acme:lamp"},
                                                 "cause": "response", "ack_statuses": None})
    assert (message["topic"], message["status"], message["value"]) == (signal.topic, 201, {"thingId": "org.acme:lamp"})
    assert message["headers"]["correlation-id"] == "c-1"


def test_a_refusal_is_dittos_error_message_on_the_frames_thing_and_correlation_id() -> None:
    problem = errors.json_invalid("no").to_json()
    named = ws_protocol.refused(problem, {"topic": "org.acme/lamp/things/live/commands/modify",
                                          "headers": {"correlation-id": "c-9"}})
    assert (named["topic"], named["headers"]["correlation-id"], named["status"], named["value"]) == (
        "org.acme/lamp/things/live/errors", "c-9", 400, problem)
    anonymous = ws_protocol.refused(problem)
    assert anonymous["topic"] == "_/_/things/twin/errors" and "correlation-id" not in anonymous["headers"]


def test_a_login_is_one_subscriber() -> None:
    assert ws_protocol.subscriber_of("alice") == ws_protocol.subscriber_of("alice") != ws_protocol.subscriber_of("bob")


# --- the streams a socket started, as its login's subscriber ------------------------------------

EVENT = subscriptions.SignalView("twin-event", "org.acme:lamp-1", "modified", "/attributes/on", True)
EVENT_ELSEWHERE = subscriptions.SignalView("twin-event", "org.b:lamp-2", "modified", "/attributes/on", False)
MESSAGE = subscriptions.SignalView("live-message", "org.acme:lamp-1", "ask", "/inbox/messages/ask", {"q": 1})
LIVE_COMMAND = subscriptions.SignalView("live-command", "org.acme:lamp-1", "modify", "/attributes/on", True)
LIVE_COMMAND_ELSEWHERE = subscriptions.SignalView("live-command", "org.b:lamp-2", "modify", "/attributes/on", True)
SIGNALS = {"event": EVENT, "event elsewhere": EVENT_ELSEWHERE, "message": MESSAGE, "live command": LIVE_COMMAND,
           "live command elsewhere": LIVE_COMMAND_ELSEWHERE}


def _received(frames: list[str]) -> set[str]:
    """The signals a subscriber declared for the streams of ``frames`` receives."""
    started = {control.stream: control for control in map(ws_protocol.control, frames)}
    wanted = ws_protocol.subscription(started)
    subscriber = subscriptions.Subscriber("websocket:alice", tuple(wanted.channels), None, wanted.filter)
    return {name for name, view in SIGNALS.items() if subscriptions.exclusion(subscriber, view) is None}


@pytest.mark.parametrize(("frames", "received"), [
    ([], {"event", "event elsewhere"}),  # as at connect: twin events, no live signal
    (["START-SEND-EVENTS"], {"event", "event elsewhere"}),
    (["START-SEND-EVENTS?namespaces=org.acme"], {"event"}),
    (["START-SEND-EVENTS?filter=eq(attributes%2Fon%2Cfalse)"], {"event elsewhere"}),
    (["START-SEND-MESSAGES"], {"event", "event elsewhere", "message"}),
    (["START-SEND-LIVE-COMMANDS"], {"event", "event elsewhere", "live command", "live command elsewhere"}),
    (["START-SEND-LIVE-COMMANDS?namespaces=org.b"], {"event", "event elsewhere", "live command elsewhere"}),
    (["START-SEND-LIVE-EVENTS"], {"event", "event elsewhere"}),  # the ledger has no live events
    (["START-SEND-EVENTS?namespaces=org.b", "START-SEND-MESSAGES?namespaces=org.b",
      "START-SEND-LIVE-COMMANDS?filter=exists(attributes%2Fon)"],
     {"event elsewhere", "live command", "live command elsewhere"}),
    (["START-SEND-MESSAGES?filter=eq(attributes%2Fon%2Ctrue)"], {"event", "event elsewhere"}),  # a message has no thing
])
def test_a_socket_receives_what_its_streams_select_and_twin_events_while_none_narrows_them(
        frames: list[str], received: set[str]) -> None:
    assert _received(frames) == received


def test_only_a_live_stream_opens_the_live_channel_and_a_bare_socket_declares_no_filter() -> None:
    assert ws_protocol.subscription({}) == ws_protocol.Subscription(("twin",), None) == ws_protocol.BARE
    assert ws_protocol.subscription({"LIVE_EVENTS": ws_protocol.control("START-SEND-LIVE-EVENTS")}) == \
        ws_protocol.subscription({})
    assert ws_protocol.subscription({"MESSAGES": ws_protocol.control("START-SEND-MESSAGES")}).channels == ("twin", "live")


def test_a_namespace_is_quoted_whatever_it_holds() -> None:
    odd = 'org."b\\'
    started = {"EVENTS": ws_protocol.Control(True, "EVENTS", None, (odd,))}
    subscriber = subscriptions.Subscriber("s", ("twin",), None, ws_protocol.subscription(started).filter)
    view = subscriptions.SignalView("twin-event", f"{odd}:x", "modified", "/attributes/on", True)
    assert subscriptions.exclusion(subscriber, view) is None
    assert subscriptions.exclusion(subscriber, EVENT) is not None


@pytest.mark.parametrize(("topic", "live"), [
    ("org.acme/lamp-1/things/live/messages/ask", True),
    ("org.acme/lamp-1/things/live/commands/modify", True),
    ("org.acme/lamp-1/things/twin/events/modified", False),
    ("no topic at all", False),
    (None, False),
])
def test_a_live_signal_is_told_by_its_topics_channel(topic: object, live: bool) -> None:
    assert ws_protocol.is_live({} if topic is None else {"topic": topic}) is live
