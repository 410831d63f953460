"""Ditto's documented acknowledgement examples end to end: subscribers, weak acks and the live
channel through the real pipeline (apply_twin → index_search → weak_acks → sweep) on PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger.store import AckStore
from ackstore.rules.errors import DittoError
from tests.support.ledger import ack_message, twin_command
from tests.support.live_signals import live_message, live_response, with_token

pytestmark = pytest.mark.spark

LABEL = "app:checked"
STEPS = ("apply_twin", "index_search", "weak_acks", "sweep")


def _weak_acks(engine: Engine, cid: str) -> list[tuple]:
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT k.label, k.status, k.weak, k.headers->>'ditto-weak-ack', k.payload #>> '{}' FROM acks k "
            "JOIN signals s ON s.id = k.signal_id WHERE s.correlation_id = :cid AND k.weak"), {"cid": cid}).all()


def _submit(store: AckStore, envelope: dict[str, Any]) -> None:
    answer = store.submit(envelope)
    assert answer["status"] == 202, answer


def test_twin_persisted_and_a_custom_ack_in_time_give_200_with_both(store: AckStore, run_pipeline) -> None:
    store.declare("app", [LABEL], channels=["twin"])
    _submit(store, twin_command(path="/", value={"attributes": {"on": True}}, correlation_id="c1",
                                requested_acks=["twin-persisted", LABEL], timeout="5m"))
    run_pipeline("apply_twin")
    (event,) = store.pull("app")
    ack = with_token(ack_message("c1", LABEL, 200, value={"checked": True}), event["headers"]["ack-token"])
    assert store.acknowledge("app", ack) == {"status": 204}
    run_pipeline(*STEPS)

    result = store.result("c1")
    assert result["status"] == 200
    body = result["body"]
    assert set(body) == {"twin-persisted", LABEL}
    assert body["twin-persisted"]["status"] == 201 and body["twin-persisted"]["payload"]["attributes"] == {"on": True}
    assert body[LABEL] == {"status": 200, "payload": {"checked": True}, "headers": {"correlation-id": "c1"}}


def test_a_missing_custom_ack_gives_424_with_a_408_entry(store: AckStore, run_pipeline) -> None:
    store.declare("app", [LABEL], channels=["twin"])
    submitted = time.monotonic()
    _submit(store, twin_command(path="/", value={}, correlation_id="c1", requested_acks=["twin-persisted", LABEL],
                                timeout="4s"))
    run_pipeline("apply_twin")  # in time: a loaded machine took more than 1.5 s to start and apply it
    time.sleep(max(0.0, 4.1 - (time.monotonic() - submitted)))  # the request's own deadline (not a lease)
    run_pipeline(*STEPS)

    result = store.result("c1")
    assert result["status"] == 424
    entry = result["body"][LABEL]
    assert entry["status"] == 408
    assert entry["payload"] == {
        "status": 408,
        "error": "acknowledgement:request.timeout",
        "message": "The acknowledgement request reached the specified timeout of 4,000ms.",
        "description": "Try increasing the timeout and make sure that the requested acknowledgement is sent back in time.",
    }
    assert result["body"]["twin-persisted"]["status"] == 201


def test_a_label_whose_declarer_filters_the_thing_out_gets_a_weak_200(
    store: AckStore, engine: Engine, run_pipeline
) -> None:
    store.declare("app", [LABEL], channels=["twin"], filter='eq(attributes/kind,"heater")')
    _submit(store, twin_command(path="/", value={"attributes": {"kind": "lamp"}}, correlation_id="c1",
                                requested_acks=["twin-persisted", LABEL]))
    stats = run_pipeline(*STEPS)

    assert stats["weak_acks"]["weak_acks"] == 1
    ((label, status, weak, header, reason),) = _weak_acks(engine, "c1")
    assert (label, status, weak, header) == (LABEL, 200, True, "true")
    assert "filter <eq(attributes/kind,\"heater\")> excludes the signal" in reason
    result = store.result("c1")
    assert result["status"] == 200  # a weak ack is a success (B.8)
    assert result["body"][LABEL]["status"] == 200
    assert result["body"][LABEL]["headers"]["ditto-weak-ack"] is True
    assert store.pull("app") == []  # and the subscriber never sees the event


@pytest.mark.parametrize(
    ("declaration", "weak"),
    [
        ({"channels": ["live"]}, True),  # does not consume twin events
        ({"channels": ["twin"], "namespaces": ["org.other"]}, True),
        ({"channels": ["twin"], "namespaces": ["org.acme"]}, False),
        ({"channels": ["twin"], "filter": 'eq(topic:action,"created")'}, False),
        ({"channels": ["twin"], "filter": 'eq(topic:action,"deleted")'}, True),
    ],
)
def test_weak_acks_follow_channels_namespaces_and_filters(
    store: AckStore, engine: Engine, run_pipeline, declaration: dict, weak: bool
) -> None:
    store.declare("app", [LABEL], **declaration)
    _submit(store, twin_command(path="/", value={}, correlation_id="c1", requested_acks=[LABEL]))
    run_pipeline(*STEPS)
    assert bool(_weak_acks(engine, "c1")) is weak
    assert (store.result("c1") is not None) is weak  # otherwise it waits for the subscriber's ack


def test_a_group_gets_no_weak_ack_while_one_member_receives(store: AckStore, engine: Engine, run_pipeline) -> None:
    store.declare("a", ["conn:checked"], connection="conn", channels=["twin"], namespaces=["org.other"])
    store.declare("b", ["conn:checked"], connection="conn", channels=["twin"])
    _submit(store, twin_command(path="/", value={}, correlation_id="c1", requested_acks=["conn:checked"]))
    run_pipeline(*STEPS)
    assert _weak_acks(engine, "c1") == []


def test_undeclared_labels_get_no_weak_ack_and_time_out(store: AckStore, engine: Engine, run_pipeline) -> None:
    _submit(store, twin_command(path="/", value={}, correlation_id="c1", requested_acks=["nobody:declared"],
                                timeout="1ms"))
    time.sleep(0.01)
    run_pipeline(*STEPS)
    assert _weak_acks(engine, "c1") == []
    assert store.result("c1")["status"] == 408


def test_a_subscriber_cannot_send_a_weak_ack(store: AckStore, engine: Engine, run_pipeline) -> None:
    store.declare("app", [LABEL], channels=["twin"])
    _submit(store, twin_command(path="/", value={}, correlation_id="c1", requested_acks=[LABEL]))
    faked = ack_message("c1", LABEL, 200)
    faked["headers"]["ditto-weak-ack"] = True
    assert store.acknowledge("app", faked) == {"status": 204}
    with engine.connect() as conn:
        weak, headers = conn.execute(text("SELECT weak, headers FROM acks")).one()
    assert weak is False and "ditto-weak-ack" not in headers


def test_a_live_message_with_a_response_gives_the_plain_response(store: AckStore, run_pipeline) -> None:
    store.declare("responder", [], channels=["live"])
    _submit(store, live_message("c1", response_required=True))
    (message,) = store.pull("responder")
    response = live_response("c1", 200, {"answer": 42}, token=message["headers"]["ack-token"])
    assert store.respond("responder", response) == {"status": 204}
    run_pipeline(*STEPS)
    assert store.result("c1") == {"status": 200, "body": {"answer": 42}, "headers": {"correlation-id": "c1"}}


def test_a_live_command_without_a_response_times_out_with_command_timeout(
    store: AckStore, engine: Engine, run_pipeline
) -> None:
    store.declare("responder", [], channels=["live"])
    command = {"topic": "org.acme/lamp-1/things/live/commands/modify", "path": "/attributes/on", "value": True,
               "headers": {"correlation-id": "c1", "timeout": "1ms"}}
    _submit(store, command)
    time.sleep(0.01)
    run_pipeline(*STEPS)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM things")).scalar_one() == 0  # never applied to the twin
    result = store.result("c1")
    assert result["status"] == 408 and result["body"]["error"] == "command.timeout"
    assert result["body"]["message"] == "The Command reached the specified timeout of 1ms."


def test_a_live_message_asking_for_a_custom_label_aggregates_it_with_the_response(
    store: AckStore, engine: Engine, run_pipeline
) -> None:
    store.declare("responder", [LABEL], channels=["live"])
    _submit(store, live_message("c1", requested_acks=[LABEL, "twin-persisted"]))  # twin built-ins are dropped
    (message,) = store.pull("responder")
    assert message["headers"]["requested-acks"] == [LABEL]
    token = message["headers"]["ack-token"]
    assert store.respond("responder", live_response("c1", 404, "no such thing here", token=token)) == {"status": 204}
    assert store.acknowledge("responder", with_token(ack_message("c1", LABEL, 200, channel="live"), token)) == {
        "status": 204}
    run_pipeline(*STEPS)
    result = store.result("c1")
    assert result["status"] == 424 and set(result["body"]) == {LABEL, "live-response"}
    assert result["body"]["live-response"]["status"] == 404
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM things")).scalar_one() == 0  # live is never applied


# Issue 50's condition (400 KB here), as a subscriber's filter a ledger stored before the bounds (decisions #117).
FILTER_PAST_THE_BOUNDS = "or(" + ",".join(['like(attributes/s,"*' + "?" * 16 + 'b*")'] * 10_000) + ")"


def test_a_filter_stored_before_the_bounds_matches_nothing_and_its_subscriber_is_told(
    store: AckStore, engine: Engine, run_pipeline
) -> None:
    """As the door would answer it now (decisions #132): the subscriber receives nothing — no live
    hand-out, its label's weak ack saying why —, its pull is answered the door's 400 and moves
    nothing; declared again within the bounds, it pulls the events since where it was."""
    assert store.declare("old", [LABEL], channels=["twin", "live"], filter='exists(attributes/s)') == {"status": 204}
    with engine.begin() as conn:  # the filter as a ledger from before holds it, through the write function
        conn.execute(text("SELECT declare_subscriber('old', NULL, :filter, NULL, '{twin,live}', :labels)"),
                     {"filter": FILTER_PAST_THE_BOUNDS, "labels": [LABEL]})
    _submit(store, twin_command(path="/", value={"attributes": {"s": "ab"}}, correlation_id="twin",
                                requested_acks=[LABEL]))
    _submit(store, live_message("live", requested_acks=[LABEL], response_required=False, timeout="5m"))

    run_pipeline(*STEPS)

    for cid in ("twin", "live"):
        ((label, status, weak, _, reason),) = _weak_acks(engine, cid)
        assert (label, status, weak) == (LABEL, 200, True)
        assert "subscriber <old>'s filter is refused: The RQL expression 'or(like(attributes/s," in reason
        assert "more than the maximum of 5,120" in reason and len(reason) < 1000
    assert store.result("twin")["status"] == 200  # a weak ack is a success (B.8)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM deliveries WHERE subscriber_id = 'old'")).scalar() == 0
        position = conn.execute(text("SELECT event_position FROM subscribers WHERE id = 'old'")).scalar()
    with pytest.raises(DittoError) as told:
        store.pull("old")
    assert (told.value.status, told.value.error) == (400, "rql.expression.invalid")
    assert told.value.message.startswith("The filter of subscriber <old>, declared before the bounds of a filter, is "
                                         "refused: The RQL expression 'or(like(attributes/s,")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT event_position FROM subscribers WHERE id = 'old'")).scalar() == position

    assert store.declare("old", [LABEL], channels=["twin", "live"], filter='exists(attributes/s)') == {"status": 204}
    (event,) = store.pull("old")
    assert (event["headers"]["correlation-id"], event["value"]) == ("twin", {"attributes": {"s": "ab"}})
