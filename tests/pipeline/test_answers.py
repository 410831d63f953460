"""What answers a signal, and what the requester is told (issue 14, defects 2–5, 9 and 11).

* A live response counts only if it answers its command (Ditto's
  ``CommandAndCommandResponseMatchingValidator``): the same thing, the same resource path, a
  response of the command's type; a mismatching one is refused with what differs, kept for the
  audit, and a later valid one still answers.
* A 408 for a live command whose only response was invalid says why
  (``AcknowledgementAggregatorActorTest.returnSingleInvalidThingCommandResponseWithoutConnectionIdForLive``).
* Only a subscriber that was handed a live signal may answer it; an ack on another thing's topic
  is refused and stored nowhere.
* The aggregated answer carries the command's own headers (``AcknowledgementAggregatorTest.keepCommandHeaders``).
* A 201 ``twin-persisted`` entry carries a ``location`` header
  (``HttpRequestActorTest.generateLocationHeaderInTwinPersistedAcknowledgementWithCreatedStatusCode``).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text

from ackstore.ledger.schema import acks, command_responses
from ackstore.ledger.store import AckStore
from ackstore.rules import aggregation, envelopes, errors, live_responses
from ackstore.rules.acks import Ack
from tests.support.ledger import ack_message, twin_command
from tests.support.live_signals import LABEL, live_message

THING = "org.acme/lamp-1"


def live_command(cid: str, action: str = "modify", path: str = "/attributes/on", **headers: Any) -> dict:
    return {"topic": f"{THING}/things/live/commands/{action}",
            "headers": {"correlation-id": cid, **{k.replace("_", "-"): v for k, v in headers.items()}},
            "path": path, "value": True}


def command_response(cid: str, *, action: str = "modify", path: str = "/attributes/on", thing: str = THING,
                     status: int = 204, token: str | None = None) -> dict:
    headers: dict[str, Any] = {"correlation-id": cid}
    if token:
        headers["ack-token"] = token
    return {"topic": f"{thing}/things/live/commands/{action}", "headers": headers, "path": path, "status": status}


def message_response(cid: str, path: str = "/outbox/messages/ask", *, thing: str = THING, status: int = 200,
                     criterion: str = "messages/ask", token: str | None = None) -> dict:
    headers: dict[str, Any] = {"correlation-id": cid}
    if token:
        headers["ack-token"] = token
    return {"topic": f"{thing}/things/live/{criterion}", "headers": headers, "path": path, "status": status,
            "value": "yes"}


# --- the matching rule, row by row ---------------------------------------------------------------

COMMAND = live_responses.LiveSignal("org.acme:lamp-1", "live-command", "modify", "/attributes/on")
MESSAGE = live_responses.LiveSignal("org.acme:lamp-1", "live-message", "ask", "/inbox/messages/ask")
FEATURE_MESSAGE = live_responses.LiveSignal("org.acme:lamp-1", "live-message", "ask", "/features/f/inbox/messages/ask")


def parsed(message: dict) -> envelopes.LiveResponse:
    return envelopes.parse_live_response(message)


MATCHING = [
    # (signal, response, why it does not answer — None: it does)
    (COMMAND, command_response("c"), None),
    (COMMAND, command_response("c", status=201), None),
    (COMMAND, command_response("c", action="retrieve", status=200),
     "Type of live response <live/commands/retrieve response> is not related to type of command "
     "<live/commands/modify>."),
    (COMMAND, message_response("c"),
     "Type of live response <live/messages (thing) response> is not related to type of command "
     "<live/commands/modify>."),
    (COMMAND, command_response("c", thing="org.acme/other"),
     "Entity ID of live response <org.acme:other> differs from entity ID of command <org.acme:lamp-1>."),
    (COMMAND, command_response("c", path="/attributes/off"),
     "Resource path of live response </attributes/off> differs from resource path of command </attributes/on>."),
    # an error response has no type or path of its own: only its thing must match
    (COMMAND, command_response("c", action="retrieve", path="/", status=404), None),
    (COMMAND, command_response("c", thing="org.acme/other", status=404),
     "Entity ID of live response <org.acme:other> differs from entity ID of command <org.acme:lamp-1>."),
    (MESSAGE, message_response("c"), None),
    (MESSAGE, message_response("c", "/inbox/messages/other", criterion="messages/other"), None),  # no path check
    (MESSAGE, message_response("c", "/features/f/outbox/messages/ask"),
     "Type of live response <live/messages (feature) response> is not related to type of command "
     "<live/messages (thing)>."),
    (FEATURE_MESSAGE, message_response("c", "/features/f/outbox/messages/ask"), None),
    (MESSAGE, command_response("c"),
     "Type of live response <live/commands/modify response> is not related to type of command <live/messages (thing)>."),
    (MESSAGE, message_response("c", thing="org.acme/x"),
     "Entity ID of live response <org.acme:x> differs from entity ID of command <org.acme:lamp-1>."),
]


@pytest.mark.parametrize(("signal", "response", "why"), MATCHING)
def test_each_row_of_the_matching_rule(signal, response, why) -> None:
    assert live_responses.mismatch(signal, parsed(response)) == why


# --- respond, end to end in the ledger ---------------------------------------------------------


@pytest.fixture
def pulled(store: AckStore) -> dict[str, str]:
    """A live command and a live message (each asking only for live-response), pulled by ``responder``."""
    assert store.declare("responder", [], channels=["live"])["status"] == 204
    assert store.declare("bystander", [], channels=["live"], namespaces=["org.other"])["status"] == 204
    assert store.submit(live_command("cmd", timeout="1s"))["status"] == 202
    assert store.submit(live_message("msg", timeout="1s"))["status"] == 202
    return {m["headers"]["correlation-id"]: m["headers"]["ack-token"] for m in store.pull("responder")}


def _acks_of(engine: Engine, cid: str) -> list[tuple]:
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT k.issuer, k.status, k.disposition, k.reason FROM acks k JOIN signals s ON s.id = k.signal_id "
            "WHERE s.correlation_id = :cid ORDER BY k.id"), {"cid": cid}).all()


def _response_status(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return conn.execute(select(command_responses.c.status)).scalars().all()


@pytest.mark.parametrize(("bad", "what"), [
    (dict(action="retrieve", status=200), "Type of live response"),
    (dict(path="/attributes/off"), "Resource path of live response"),
    (dict(thing="org.acme/other"), "Entity ID of live response"),
])
def test_a_mismatching_response_is_refused_kept_for_the_audit_and_a_later_valid_one_answers(
        store: AckStore, engine: Engine, pulled, bad, what) -> None:
    answer = store.respond("responder", command_response("cmd", token=pulled["cmd"], **bad))
    assert (answer["status"], answer["error"]) == (400, "acknowledgement:live.response.invalid")
    assert what in answer["message"]
    (kept,) = _acks_of(engine, "cmd")
    assert kept[:3] == ("responder", bad.get("status", 204), "invalid") and kept[3].startswith(what)
    assert _response_status(engine) == [], "it is not the command's response"
    assert store.respond("responder", command_response("cmd", token=pulled["cmd"])) == {"status": 204}
    assert [row[2] for row in _acks_of(engine, "cmd")] == ["invalid", "counted"]
    assert _response_status(engine) == [204]


@pytest.mark.spark
def test_a_408_for_a_live_command_whose_only_response_was_invalid_says_why(store: AckStore, pulled,
                                                                           run_pipeline) -> None:
    import time

    store.respond("responder", command_response("cmd", thing="org.acme/other", token=pulled["cmd"]))
    time.sleep(1.2)  # the 1 s deadline passes
    run_pipeline("sweep")
    result = store.result("cmd")
    assert result["status"] == 408 and result["body"]["error"] == "command.timeout"
    assert result["body"]["description"] == (
        "Received no appropriate live response within the specified timeout. An invalid response was received, "
        "though: Entity ID of live response <org.acme:other> differs from entity ID of command <org.acme:lamp-1>.")
    assert store.result("msg")["body"]["description"] == "Try increasing the command timeout."  # no response at all


def test_only_a_subscriber_that_was_handed_the_signal_may_answer_it(store: AckStore, engine: Engine, pulled) -> None:
    assert store.declare("late-comer", [], channels=["live"])["status"] == 204  # matches, never pulled
    for subscriber in ("bystander", "late-comer"):
        answer = store.respond(subscriber, message_response("msg"))
        assert (answer["status"], answer["error"]) == (403, "acknowledgement:live.response.forbidden"), answer
        forged = store.respond(subscriber, message_response("msg", token=pulled["msg"]))
        assert forged["error"] == "acknowledgement:token.invalid"  # another subscriber's token
    assert _acks_of(engine, "msg") == [] and _response_status(engine) == []
    assert store.respond("responder", message_response("msg")) == {"status": 204}  # handed: without a token too


def test_an_ack_on_another_things_topic_is_refused_and_stored_nowhere(store: AckStore, engine: Engine) -> None:
    assert store.declare("app", [LABEL])["status"] == 204
    assert store.submit(twin_command(correlation_id="t1", requested_acks=[LABEL]))["status"] == 202
    answer = store.acknowledge("app", ack_message("t1", LABEL, thing="org.acme/other"))
    assert (answer["status"], answer["error"]) == (400, "acknowledgement:entity.id.mismatch")
    assert "org.acme:other" in answer["message"] and "org.acme:lamp-1" in answer["message"]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(acks)).scalar_one() == 0
    assert store.acknowledge("app", ack_message("t1", LABEL)) == {"status": 204}


def test_an_ack_on_another_channel_than_its_signals_is_refused_and_stored_nowhere(store: AckStore, engine: Engine) -> None:
    assert store.declare("app", [LABEL], channels=["twin", "live"])["status"] == 204
    assert store.submit(twin_command(correlation_id="t1", requested_acks=[LABEL]))["status"] == 202
    assert store.submit(live_message("m1", **{"requested-acks": [LABEL]}), api="http")["status"] == 202
    for cid, wrong, right in (("t1", "live", "twin"), ("m1", "twin", "live")):
        answer = store.acknowledge("app", ack_message(cid, LABEL, channel=wrong))
        assert (answer["status"], answer["error"]) == (400, "acknowledgement:channel.mismatch"), answer
        assert f"<{wrong}>" in answer["message"] and f"<{right}>" in answer["message"]
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(acks)).scalar_one() == 0
    for cid, right in (("t1", "twin"), ("m1", "live")):
        assert store.acknowledge("app", ack_message(cid, LABEL, channel=right)) == {"status": 204}


def test_a_pulled_signal_shows_only_the_labels_its_subscriber_declared(store: AckStore) -> None:
    assert store.declare("mine", ["mine:done"], channels=["live"])["status"] == 204
    assert store.declare("theirs", ["theirs:done"], channels=["live"])["status"] == 204
    assert store.declare("silent", [], channels=["live"])["status"] == 204
    store.submit(live_message("both", requested_acks=["mine:done", "theirs:done"], response_required=False))
    assert store.pull("mine")[0]["headers"]["requested-acks"] == ["mine:done"]
    assert store.pull("theirs")[0]["headers"]["requested-acks"] == ["theirs:done"]
    assert "requested-acks" not in store.pull("silent")[0]["headers"]


# --- what the requester is told ----------------------------------------------------------------


def _request(*labels: str, api: str = "http", rr: bool = True, path: str = "/", headers=None) -> aggregation.Request:
    return aggregation.Request("cid", labels, rr, 60_000, api, headers or {"correlation-id": "cid", "x-custom": "k",
                                                                           "response-required": rr, "timeout": "60s"},
                               "org.acme:t1", path)


AGGREGATED = [  # (request, acks, deadline passed) whose answer is aggregated acks
    (_request("twin-persisted", "org:a"), [Ack("twin-persisted", 204), Ack("org:a", 200)], False),
    (_request("twin-persisted", "org:a"), [Ack("twin-persisted", 204)], True),  # 424 with a placeholder
    (_request("org:a"), [Ack("org:a", 400)], False),
    (_request("twin-persisted", "org:a", rr=False), [Ack("twin-persisted", 204), Ack("org:a", 200)], False),  # 202
    (_request("twin-persisted", "org:a", rr=False), [Ack("twin-persisted", 204)], True),
]


@pytest.mark.parametrize(("request_", "received", "passed"), AGGREGATED)
def test_an_aggregated_answer_carries_the_commands_headers(request_, received, passed) -> None:
    result = aggregation.decide(request_, acks=received, deadline_passed=passed)
    assert result.headers == {"correlation-id": "cid", "x-custom": "k", "response-required": False,
                              "timeout": "60s"}, "custom headers kept; requested-acks gone; response-required false"


def test_requested_acks_never_reach_the_answers_headers() -> None:
    request_ = _request("org:a", headers={"correlation-id": "cid", "requested-acks": ["org:a"]})
    result = aggregation.decide(request_, acks=[Ack("org:a", 200)])
    assert "requested-acks" not in result.headers


@pytest.mark.parametrize(("api", "status", "path", "location"), [
    ("http", 201, "/", "/api/2/things/org.acme:t1"),
    ("http", 201, "/attributes/room", "/api/2/things/org.acme:t1/attributes/room"),
    ("http", 201, "/features/f 1/properties/x", "/api/2/things/org.acme:t1/features/f%201/properties/x"),
    ("http", 204, "/attributes/room", None),  # only a created resource has a location
    ("websocket", 201, "/", None),  # the HTTP gateway adds it
    ("connectivity", 201, "/", None),
])
def test_a_201_twin_persisted_entry_carries_the_created_resources_location(api, status, path, location) -> None:
    request_ = _request("twin-persisted", "org:a", api=api, path=path)
    result = aggregation.decide(request_, acks=[Ack("twin-persisted", status, {"x": 1}), Ack("org:a", 200)])
    assert result.body["twin-persisted"]["headers"].get("location") == location
    assert "location" not in result.body["org:a"]["headers"]


def test_the_plain_response_and_an_error_keep_only_the_correlation_id() -> None:
    plain = aggregation.decide(_request("twin-persisted"), acks=[Ack("twin-persisted", 201, {"x": 1})])
    assert plain.headers == {"correlation-id": "cid"} and plain.body == {"x": 1}
    failed = aggregation.decide(_request("twin-persisted", "org:a"), error=errors.thing_not_found("org.acme:t1"))
    assert failed.headers == {"correlation-id": "cid"}


@pytest.mark.spark
def test_the_stored_answer_has_the_commands_headers_and_the_location(store: AckStore, run_pipeline) -> None:
    store.declare("app", ["app:seen"])
    created = store.submit(twin_command("create", path="/", value={"attributes": {"a": 1}}, correlation_id="new",
                                        requested_acks=["twin-persisted", "app:seen"], x_trace="t-1"))
    assert created["status"] == 202
    assert store.acknowledge("app", ack_message("new", "app:seen")) == {"status": 204}
    run_pipeline()
    result = store.result("new")
    assert result["status"] == 200
    assert result["headers"]["x-trace"] == "t-1" and result["headers"]["response-required"] is False
    assert "requested-acks" not in result["headers"]
    assert result["body"]["twin-persisted"]["headers"]["location"] == "/api/2/things/org.acme:lamp-1"
