"""Ditto's WebSocket, ``/ws/2`` (issue 51, decisions #136), spoken to with the ``websockets`` client
over a real server (``ackstore serve``): commands stored and answered on the socket once the ledger
decided them, acks issued under the labels the socket declared at connect, control frames
acknowledged, every bad frame answered with Ditto's error while the socket serves on, and the
ledger unchanged by what was refused."""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection

from tests.support.broker import wait_for
from tests.support.door import DoorProcess, door  # noqa: F401 — a fixture
from tests.support.ledger import snapshot
from tests.support.logins import two_logins  # noqa: F401 — a fixture

pytestmark = [pytest.mark.spark]

THING = "org.acme:lamp-ws"
TOPIC = "org.acme/lamp-ws/things/twin"


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM signals")).scalar_one()


def _modify(correlation_id: str, value: Any = None, **given: Any) -> str:
    return json.dumps({"topic": f"{TOPIC}/commands/modify", "path": "/", "value": value or {"attributes": {"on": True}},
                       "headers": {"correlation-id": correlation_id, **given}})


def _received(socket: ClientConnection, timeout: float = 60) -> Any:
    frame = socket.recv(timeout)
    return json.loads(frame) if frame.startswith("{") else frame


def _decided(socket: ClientConnection, frame: str, engine: Engine, run_pipeline) -> dict[str, Any]:
    """Send a command, wait until it is stored, run the pipeline, and the socket's answer."""
    before = _count(engine)
    socket.send(frame)
    wait_for(lambda: _count(engine) > before, what="the command stored")
    with pytest.raises(TimeoutError):  # held: the ledger has not decided it
        socket.recv(0.2)
    run_pipeline()
    return _received(socket)


def test_a_command_with_requested_acks_is_answered_on_the_socket_once_decided(
        door, engine, run_pipeline, two_logins) -> None:  # noqa: F811
    with door.socket(two_logins[0]) as socket:
        answer = _decided(socket, _modify("ws-1", **{"requested-acks": ["twin-persisted", "search-persisted"],
                                                     "timeout": "60s"}), engine, run_pipeline)
    assert (answer["topic"], answer["status"], answer["headers"]["correlation-id"]) == (f"{TOPIC}/acks", 200, "ws-1")
    assert answer["value"]["twin-persisted"]["status"] == 201
    assert answer["value"]["search-persisted"]["status"] == 204
    with engine.connect() as conn:
        assert conn.execute(text("SELECT api, source FROM signals")).one() == ("websocket", "api")


def test_a_plain_command_is_answered_with_its_response(door, engine, run_pipeline, two_logins) -> None:  # noqa: F811
    with door.socket(two_logins[0]) as socket:
        answer = _decided(socket, _modify("ws-2"), engine, run_pipeline)
        assert (answer["topic"], answer["status"], answer["value"]) == (
            f"{TOPIC}/commands/modify", 201, {"thingId": THING, "attributes": {"on": True}})
        socket.send(_modify("ws-3", **{"response-required": False}))  # B.7: no answer on a socket
        wait_for(lambda: _count(engine) == 2, what="the command stored")
        with pytest.raises(TimeoutError):
            socket.recv(0.5)


@pytest.mark.parametrize(("status", "aggregated"), [(200, 200), (500, 424)])
def test_an_ack_issued_over_the_socket_under_a_declared_label_counts(
        door, engine, run_pipeline, two_logins, status: int, aggregated: int) -> None:  # noqa: F811
    with door.socket(two_logins[0], query="declared-acks=app:done") as socket:
        before = _count(engine)
        socket.send(_modify("ws-ack", **{"requested-acks": ["twin-persisted", "app:done"], "timeout": "60s"}))
        wait_for(lambda: _count(engine) > before, what="the command stored")
        socket.send(json.dumps({"topic": f"{TOPIC}/acks/app:done", "status": status, "value": {"done": True},
                                "headers": {"correlation-id": "ws-ack"}}))
        wait_for(lambda: _acks(engine) == 1, what="the ack stored")
        run_pipeline()
        answer = _received(socket)
    assert (answer["topic"], answer["status"]) == (f"{TOPIC}/acks", aggregated)
    assert answer["value"]["app:done"]["status"] == status
    assert answer["value"]["app:done"]["payload"] == {"done": True}


def test_events_asked_for_are_pushed_and_acked_over_the_socket_and_a_dropped_one_comes_again(
        door, engine, run_pipeline, two_logins) -> None:  # noqa: F811
    """START-SEND-EVENTS with a filter and extraFields: the event of a command that requests the
    socket's label is pushed under a lease (A.3), with what extraFields chose of its thing; a socket that drops it unacknowledged gets it again on the login's
    next socket once the lease ended (beyond Ditto, decisions #136); the ack it then sends over the
    socket counts for the command, answered 200 on the commanding socket."""
    subscriber, commander = two_logins
    with door.socket(subscriber, query="declared-acks=app:seen") as first:
        first.send("START-SEND-EVENTS?filter=" + "eq(attributes%2Fon%2Ctrue)" + "&namespaces=org.acme"
                   "&extraFields=" + "attributes(on,none)%2C_revision")
        assert first.recv(30) == "START-SEND-EVENTS:ACK"
        with door.socket(commander) as command:
            before = _count(engine)
            command.send(_modify("ws-ev", **{"requested-acks": ["twin-persisted", "app:seen"], "timeout": "120s"}))
            command.send(_modify("ws-other", {"attributes": {"on": False}}, **{"requested-acks": ["app:seen"],
                                                                                "timeout": "120s"}))
            wait_for(lambda: _count(engine) == before + 2, what="the commands stored")
            run_pipeline()
            event = _received(first)
            assert (event["topic"], event["value"], event["headers"]["correlation-id"]) == (
                f"{TOPIC}/events/created", {"attributes": {"on": True}}, "ws-ev")
            assert event["headers"]["delivery-count"] == 1 and event["headers"]["ack-token"]
            # its thing as extraFields chose, as it is when pushed: after the other command too (as Ditto enriches)
            assert event["extra"] == {"attributes": {"on": False}, "_revision": 2}
            with pytest.raises(TimeoutError):  # the other command's event is outside the filter
                first.recv(1)
    with door.socket(subscriber, query="declared-acks=app:seen") as second, door.socket(commander) as command:
        second.send("START-SEND-EVENTS?filter=" + "eq(attributes%2Fon%2Ctrue)")
        assert second.recv(30) == "START-SEND-EVENTS:ACK"
        again = _received(second, timeout=90)  # once the first hand-out's lease ended
        assert "extra" not in again  # this socket's stream chose no extraFields
        assert (again["headers"]["correlation-id"], again["headers"]["delivery-count"]) == ("ws-ev", 2)
        second.send(json.dumps({"topic": f"{TOPIC}/acks/app:seen", "status": 200,
                                "headers": {"correlation-id": "ws-ev", "ack-token": again["headers"]["ack-token"]}}))
        wait_for(lambda: _acks(engine, "app:seen") == 1, what="the ack stored")
        run_pipeline()
    with engine.connect() as conn:
        answered = conn.execute(text("SELECT r.status FROM request_answers r JOIN signals s ON s.id = r.signal_id "
                                     "WHERE s.correlation_id = 'ws-ev'")).scalar_one()
    assert answered == 200


def _acks(engine: Engine, label: str = "app:done") -> int:
    """The acks a subscriber issued under ``label``: not the weak ones the pipeline stores for a
    subscriber whose filter left the signal out (B.8), which a wait for the subscriber's would count."""
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM acks WHERE label = :label AND NOT weak"),
                            {"label": label}).scalar_one()


class HeldRequest:
    """An HTTP request held for its decision, sent from a thread of its own."""

    def __init__(self, client: httpx.Client, method: str, path: str, **options: Any) -> None:
        self.answer: httpx.Response | None = None
        self.thread = threading.Thread(target=self._send, args=(client, method, path), kwargs=options, daemon=True)
        self.thread.start()

    def _send(self, client: httpx.Client, method: str, path: str, **options: Any) -> None:
        self.answer = client.request(method, path, **options)

    def answered(self) -> httpx.Response:
        self.thread.join(120)
        assert self.answer is not None, "the held request was not answered"
        return self.answer


def test_a_live_message_is_pushed_to_a_socket_that_started_messages_and_its_response_answers_the_sender(
        door, engine, run_pipeline, two_logins) -> None:  # noqa: F811
    sender, responder = two_logins
    with door.socket(responder) as socket, door.client(sender) as client:
        socket.send("START-SEND-MESSAGES")
        assert socket.recv(30) == "START-SEND-MESSAGES:ACK"
        held = HeldRequest(client, "POST", f"/api/2/things/{THING}/inbox/messages/ask?timeout=60",
                           json={"q": 1}, headers={"correlation-id": "ask-over-ws"})
        message = _received(socket)
        assert (message["topic"], message["path"], message["value"]) == (
            "org.acme/lamp-ws/things/live/messages/ask", "/inbox/messages/ask", {"q": 1})
        assert message["headers"]["correlation-id"] == "ask-over-ws"
        socket.send(json.dumps({"topic": message["topic"], "path": "/outbox/messages/ask", "status": 200,
                                "value": {"answer": 42},
                                "headers": {"correlation-id": "ask-over-ws", "content-type": "application/json"}}))
        with pytest.raises(TimeoutError):  # a stored response gets no answer, as in Ditto
            socket.recv(1)
        run_pipeline()
        answer = held.answered()
    assert (answer.status_code, answer.json()) == (200, {"answer": 42})


def test_a_live_command_is_pushed_only_to_a_socket_that_started_live_commands(
        door, engine, run_pipeline, two_logins) -> None:  # noqa: F811
    sender, responder = two_logins
    command = json.dumps({"topic": "org.acme/lamp-ws/things/live/commands/modify", "path": "/attributes/on",
                          "value": True, "headers": {"correlation-id": "live-over-ws", "timeout": "60s"}})
    with door.socket(responder) as socket, door.socket(sender) as requester:
        socket.send("START-SEND-MESSAGES")  # messages only: the live command is not this stream's
        assert socket.recv(30) == "START-SEND-MESSAGES:ACK"
        requester.send(command.replace("live-over-ws", "live-unseen"))
        with pytest.raises(TimeoutError):
            socket.recv(3)  # six pulls at least
        socket.send("START-SEND-LIVE-COMMANDS")
        assert socket.recv(30) == "START-SEND-LIVE-COMMANDS:ACK"
        requester.send(command)
        pushed = _received(socket)
        assert (pushed["topic"], pushed["headers"]["correlation-id"]) == (
            "org.acme/lamp-ws/things/live/commands/modify", "live-over-ws")
        socket.send(json.dumps({"topic": pushed["topic"], "path": "/attributes/on", "status": 204,
                                "headers": {"correlation-id": "live-over-ws"}}))
        run_pipeline()
        answer = _received(requester)
    assert (answer["topic"], answer["status"], answer["headers"]["correlation-id"]) == (
        "org.acme/lamp-ws/things/live/commands/modify", 204, "live-over-ws")


@pytest.mark.parametrize("frame", ["START-SEND-EVENTS", "START-SEND-MESSAGES", "START-SEND-LIVE-COMMANDS"])
def test_a_socket_without_labels_starts_a_stream_and_pulls_as_its_subscriber(door, two_logins, frame) -> None:  # noqa: F811
    """No declared-acks: the login's subscriber is declared by the first stream it pulls for, so
    the pulls find it (no 404 on the socket)."""
    with door.socket(two_logins[1]) as socket:
        socket.send(frame)
        assert socket.recv(30) == f"{frame}:ACK"
        with pytest.raises(TimeoutError):  # nothing pushed, and no error: the pulls found the subscriber
            socket.recv(2)


def test_streams_whose_filters_together_pass_5_kib_are_refused_and_the_socket_serves_on(
        door, engine, two_logins) -> None:  # noqa: F811
    """Each filter within its bound, the two joined past it: the second START is the declaration's
    400 and leaves the streams as they were."""
    near = "or(" + ",".join(f'eq(attributes/a{n},"{"x" * 20}")' for n in range(110)) + ")"  # ~3.6 KiB
    with door.socket(two_logins[0]) as socket:
        socket.send(f"START-SEND-EVENTS?filter={quote(near)}")
        assert socket.recv(30) == "START-SEND-EVENTS:ACK"
        before = snapshot(engine)
        socket.send(f"START-SEND-MESSAGES?filter={quote(near)}")
        refused = _received(socket)
        assert (refused["status"], refused["value"]["error"]) == (400, "rql.expression.invalid"), refused
        assert snapshot(engine) == before
        socket.send("STOP-SEND-MESSAGES")  # never started: nothing to declare
        assert socket.recv(30) == "STOP-SEND-MESSAGES:ACK"


def test_a_live_response_to_nothing_handed_out_is_refused_on_the_socket(door, engine, two_logins) -> None:  # noqa: F811
    with door.socket(two_logins[0]) as socket:
        socket.send("START-SEND-LIVE-COMMANDS")
        assert socket.recv(30) == "START-SEND-LIVE-COMMANDS:ACK"
        socket.send(json.dumps({"topic": "org.acme/lamp-ws/things/live/commands/modify", "path": "/attributes/on",
                                "status": 204, "headers": {"correlation-id": "never-sent"}}))
        refused = _received(socket)
    assert refused["topic"].endswith("/errors") and refused["status"] == 404, refused


def test_a_label_another_login_holds_closes_the_socket_with_dittos_error(
        door, engine, two_logins) -> None:  # noqa: F811
    with door.socket(two_logins[0], query="declared-acks=app:mine") as holder:
        holder.send("START-SEND-EVENTS")
        assert holder.recv(30) == "START-SEND-EVENTS:ACK"  # declared, serving
        with door.socket(two_logins[1], query="declared-acks=app:mine") as other:
            error = _received(other)
            assert (error["topic"], error["status"], error["value"]["error"]) == (
                "_/_/things/twin/errors", 409, "acknowledgement:label.not.unique")
            with pytest.raises(ConnectionClosed):
                other.recv(30)
        ack = json.dumps({"topic": f"{TOPIC}/acks/app:mine", "status": 200, "headers": {"correlation-id": "nope"}})
        holder.send(ack)  # the holder's label still is its: an unknown request, not an undeclared label
        assert _received(holder)["value"]["error"] == "acknowledgement:request.notfound"
    # the holder gone, its labels are free again once the door noticed (as Ditto frees a closed socket's)
    wait_for(lambda: _declares(door, two_logins[1], "app:mine"), what="the closed socket's label given back")


def test_a_login_reconnecting_at_once_keeps_the_labels_its_new_socket_declared(
        door, two_logins) -> None:  # noqa: F811
    """A login's last socket closing gives its labels back while its next socket declares them:
    the two never land in the wrong order, which would leave the new socket's acks refused as
    undeclared (a CI run's redelivery test lost its ack so)."""
    ack = json.dumps({"topic": f"{TOPIC}/acks/app:again", "status": 200, "headers": {"correlation-id": "nope"}})
    for _ in range(10):
        with door.socket(two_logins[0], query="declared-acks=app:again") as first:
            first.send("STOP-SEND-EVENTS")
            assert first.recv(30) == "STOP-SEND-EVENTS:ACK"
        with door.socket(two_logins[0], query="declared-acks=app:again") as second:
            time.sleep(0.3)  # time for the first socket's release, were it to land after this declaration
            second.send(ack)
            assert _received(second)["value"]["error"] == "acknowledgement:request.notfound"


def test_a_logins_labels_are_given_back_by_its_last_socket_whichever_declared_them(
        door, two_logins) -> None:  # noqa: F811
    """A socket that declared labels closes while another of the login's, which declared none, has
    just opened: the labels are given back when that one closes, and another login may take them."""
    holder, other = two_logins
    for round in range(5):
        label = f"app:left-{round}"
        with door.socket(holder, query=f"declared-acks={label}") as first:
            first.send("STOP-SEND-EVENTS")
            assert first.recv(30) == "STOP-SEND-EVENTS:ACK"
        with door.socket(holder) as second:  # declares nothing
            second.send("STOP-SEND-EVENTS")
            assert second.recv(30) == "STOP-SEND-EVENTS:ACK"
        wait_for(lambda: _declares(door, other, label), what=f"{label} given back")


def _declares(door: DoorProcess, login: str, label: str) -> bool:
    """Whether a socket of ``login`` declaring ``label`` is served (not refused and closed: the
    door may have closed it before the frame is sent, or after)."""
    with door.socket(login, query=f"declared-acks={label}") as socket:
        try:
            socket.send("STOP-SEND-EVENTS")
            return socket.recv(30) == "STOP-SEND-EVENTS:ACK"
        except ConnectionClosed:
            return False


@pytest.mark.parametrize(("frame", "status", "error"), [
    ("{not json", 400, "json.invalid"),
    ("[]", 400, "json.invalid"),
    ("[" * 200 + "]" * 200, 400, "json.invalid"),
    (json.dumps({"topic": "org.acme/x/things/twin/commands/modify", "path": "/"}), 400, "json.field.missing"),
    (json.dumps({"topic": "nowhere", "path": "/", "value": {}}), 400, "things.protocol.adapter:unknown.topicpath"),
    (_modify("ws-bad", **{"timeout": "soon"}), 400, "timeout.invalid"),
    (_modify("ws-bad", **{"requested-acks": ["app:x"], "response-required": False}), 400, "header.invalid"),
    (json.dumps({"topic": f"{TOPIC}/acks/app:undeclared", "status": 200, "headers": {"correlation-id": "c"}}),
     400, "acknowledgement:label.not.declared"),
    (json.dumps({"topic": f"{TOPIC}/acks/twin-persisted", "status": 200, "headers": {"correlation-id": "c"}}),
     400, "acknowledgement:ditto.acklabel.forbidden"),
    ("START-SEND-EVENTS?filter=eq(attributes", 400, "rql.expression.invalid"),
    ('{"a": "' + "x" * 1_500_000 + '"}', 413, "message.toolarge"),
])
def test_a_bad_frame_gets_dittos_error_and_the_socket_serves_on(
        door, engine, two_logins, frame: str, status: int, error: str) -> None:  # noqa: F811
    before = snapshot(engine)
    with door.socket(two_logins[0], max_size=None) as socket:
        socket.send(frame)
        answer = _received(socket)
        assert (answer["status"], answer["value"]["status"], answer["value"]["error"]) == (status, status, error)
        assert answer["topic"].endswith("/errors") and answer["value"]["message"]
        socket.send("START-SEND-LIVE-EVENTS")  # declares nothing: the ledger has no live events
        assert socket.recv(30) == "START-SEND-LIVE-EVENTS:ACK"
    assert snapshot(engine) == before


def test_a_frame_past_twice_the_message_size_closes_the_socket_unread(door, engine, two_logins) -> None:  # noqa: F811
    before = snapshot(engine)
    with door.socket(two_logins[0], max_size=None) as socket:
        socket.send('{"a": "' + "x" * 2_200_000 + '"}')
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    with door.socket(two_logins[0]) as socket:  # the door serves on
        socket.send("START-SEND-LIVE-EVENTS")  # declares nothing: the ledger has no live events
        assert socket.recv(30) == "START-SEND-LIVE-EVENTS:ACK"
    assert snapshot(engine) == before


def test_a_socket_that_never_reads_is_closed_not_buffered_for(door, engine, two_logins) -> None:  # noqa: F811
    """Frames each answered with a 20 kB error, never read: once the network's buffers and the
    socket's outgoing queue (socket.OUTGOING_MAX) are full, the door closes the socket (1013)
    rather than buffer more."""
    from ackstore.doors.socket import OUTGOING_MAX

    frame = json.dumps({"topic": "x" * 20_000, "path": "/"})
    with door.socket(two_logins[0], max_queue=1) as deaf:
        closed = None
        for _ in range(OUTGOING_MAX * 10):
            try:
                deaf.send(frame)
            except ConnectionClosed as problem:
                closed = problem
                break
        if closed is None:
            with pytest.raises(ConnectionClosed) as raised:
                while True:
                    deaf.recv(30)
            closed = raised.value
    # the client never read the close frame (1013) either: the door's log says why it closed
    assert wait_for(lambda: any("it does not read what it is sent" in line for line in door.log),
                    what="the door closing the socket"), closed
    with door.socket(two_logins[0]) as socket:  # the door serves on
        socket.send("START-SEND-LIVE-EVENTS")  # declares nothing: the ledger has no live events
        assert socket.recv(30) == "START-SEND-LIVE-EVENTS:ACK"


def test_the_open_sockets_are_a_metric_of_the_door(door, two_logins) -> None:  # noqa: F811
    def open_sockets() -> float:
        families = text_string_to_metric_families(httpx.get(f"{door.url}/metrics").text)
        return next(family.samples[0].value for family in families if family.name == "ackstore_http_open_sockets")

    with door.socket(two_logins[0]), door.socket(two_logins[1]):
        assert wait_for(lambda: open_sockets() == 2, what="two sockets counted")
    wait_for(lambda: open_sockets() == 0, what="the closed sockets uncounted")


@pytest.mark.parametrize("login", [None, ""])
def test_a_socket_without_usable_credentials_is_refused_before_it_opens(door, engine, login) -> None:
    with pytest.raises(InvalidStatus) as refused:
        door.socket(login, password="" if login == "" else "any")
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"] == "gateway:authentication.failed"
    assert _count(engine) == 0
