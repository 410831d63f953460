"""Pulling with leases (A.3) and live responses, on the real PostgreSQL.

Live signals need no pipeline to be handed out (they are fanned out when stored), so most lease
rules are checked on them; twin events come from the real apply_twin step. Leases are judged by
a clock the test moves: nothing here sleeps for a lease.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text

from ackstore.ledger import handouts
from ackstore.ledger.schema import acks, command_responses
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from tests.support.ledger import ack_message, twin_command
from tests.support.live_signals import LABEL, Clock, live_message, live_response, with_token


@pytest.fixture
def clock(engine: Engine) -> Clock:
    return Clock(engine)


@pytest.fixture
def leased(engine: Engine, clock: Clock) -> AckStore:
    return AckStore(engine, Settings(), clock=clock)


def _counted(engine: Engine, cid: str, label: str = LABEL) -> list[tuple]:
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT k.issuer, k.status, k.disposition FROM acks k JOIN signals s ON s.id = k.signal_id "
            "WHERE s.correlation_id = :cid AND k.label = :label ORDER BY k.id"), {"cid": cid, "label": label}).all()


def _submit_live(store: AckStore, cid: str, **headers: Any) -> None:
    headers.setdefault("requested_acks", [LABEL])
    headers.setdefault("response_required", False)
    assert store.submit(live_message(cid, **headers))["status"] == 202


# --- who gets what -------------------------------------------------------------------------------


def test_a_live_signal_goes_to_every_subscriber_it_matches(leased: AckStore) -> None:
    leased.declare("all", [LABEL], channels=["live"])
    leased.declare("acme", [], channels=["live"], namespaces=["org.acme"])
    leased.declare("other-ns", [], channels=["live"], namespaces=["org.other"])
    leased.declare("twin-only", [], channels=["twin"])
    leased.declare("asks", [], channels=["live"], filter='eq(topic:action,"ask")')
    leased.declare("tells", [], channels=["live"], filter='eq(topic:action,"tell")')
    _submit_live(leased, "c1")

    got = {sub: leased.pull(sub) for sub in ("all", "acme", "other-ns", "twin-only", "asks", "tells")}
    assert {sub for sub, messages in got.items() if messages} == {"all", "acme", "asks"}
    message = got["all"][0]
    assert message["topic"] == "org.acme/lamp-1/things/live/messages/ask"
    assert message["value"] == {"question": "c1"}
    headers = message["headers"]
    assert headers["correlation-id"] == "c1" and headers["requested-acks"] == [LABEL]
    assert headers["delivery-count"] == 1 and isinstance(headers["ack-token"], str)


def test_competing_consumers_never_share_a_lease(leased: AckStore, clock: Clock) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    for n in range(5):
        _submit_live(leased, f"c{n}")
    first = leased.pull("app", max=3)
    second = leased.pull("app", max=3)
    ids = [m["headers"]["correlation-id"] for m in first + second]
    assert ids == ["c0", "c1", "c2", "c3", "c4"]  # oldest first, each once
    assert leased.pull("app") == []  # all leased
    clock.advance(31)
    again = leased.pull("app")
    assert [m["headers"]["delivery-count"] for m in again] == [2] * 5
    assert {m["headers"]["ack-token"] for m in again}.isdisjoint({m["headers"]["ack-token"] for m in first + second})


def test_two_connections_interleaved_by_hand_never_get_the_same_signal(engine: Engine, clock: Clock) -> None:
    store = AckStore(engine, Settings(), clock=clock)
    store.declare("app", [LABEL], channels=["live"])
    for n in range(6):
        _submit_live(store, f"c{n}")
    with engine.connect() as a, engine.connect() as b:
        with a.begin(), b.begin():  # both transactions open at once: a's locks are held while b pulls
            got_a = handouts.pull(a, "app", limit=4, lease_ms=30_000, now=clock(), max_scan=1000)
            got_b = handouts.pull(b, "app", limit=4, lease_ms=30_000, now=clock(), max_scan=1000)
    ids_a = {m["headers"]["correlation-id"] for m in got_a}
    ids_b = {m["headers"]["correlation-id"] for m in got_b}
    assert len(ids_a) == 4 and len(ids_b) == 2 and not ids_a & ids_b


# --- tokens ------------------------------------------------------------------------------------------


def test_an_ack_with_the_current_token_counts_once(leased: AckStore, engine: Engine) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    _submit_live(leased, "c1")
    (message,) = leased.pull("app")
    ack = with_token(ack_message("c1", LABEL, 200, channel="live"), message["headers"]["ack-token"])
    assert leased.acknowledge("app", ack) == {"status": 204}
    assert leased.acknowledge("app", ack) == {"status": 204}  # a retransmission
    assert _counted(engine, "c1") == [("app", 200, "counted")]
    with engine.connect() as conn:
        headers = conn.execute(select(acks.c.headers)).scalar_one()
    assert "ack-token" not in headers  # the token is transport, not part of the ack
    assert leased.pull("app") == []  # answered: never handed out again


def test_a_superseded_token_is_412_and_stores_nothing(leased: AckStore, engine: Engine, clock: Clock) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    _submit_live(leased, "c1")
    (old,) = leased.pull("app", lease="10s")
    clock.advance(11)
    (new,) = leased.pull("app", lease="10s")
    clock.advance(11)  # the superseding lease has run out too
    stale = with_token(ack_message("c1", LABEL, 200, channel="live"), old["headers"]["ack-token"])
    answer = leased.acknowledge("app", stale)
    assert answer["status"] == 412 and answer["error"] == "acknowledgement:lease.superseded"
    assert _counted(engine, "c1") == []
    current = with_token(ack_message("c1", LABEL, 200, channel="live"), new["headers"]["ack-token"])
    assert leased.acknowledge("app", current) == {"status": 204}  # still current: nobody was handed it since
    assert _counted(engine, "c1") == [("app", 200, "counted")]


def test_tokens_never_issued_for_this_subscriber_and_signal_are_400(leased: AckStore, engine: Engine) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    leased.declare("other", ["audit:other"], channels=["live"])
    _submit_live(leased, "c1", requested_acks=[LABEL, "audit:other"])
    _submit_live(leased, "c2")
    first, second = leased.pull("app")
    (others,) = [m for m in leased.pull("other") if m["headers"]["correlation-id"] == "c1"]
    cases = [
        ("app", with_token(ack_message("c1", LABEL, channel="live"), second["headers"]["ack-token"])),  # other signal
        ("app", with_token(ack_message("c1", LABEL, channel="live"), others["headers"]["ack-token"])),  # other subscriber
        ("app", with_token(ack_message("c1", LABEL, channel="live"), "1.forged")),
        ("app", with_token(ack_message("c1", LABEL, channel="live"), "")),
    ]
    for subscriber, ack in cases:
        answer = leased.acknowledge(subscriber, ack)
        assert answer["status"] == 400 and answer["error"] == "acknowledgement:token.invalid", answer
    assert _counted(engine, "c1") == []
    assert first["headers"]["correlation-id"] == "c1"


def test_an_ack_after_its_lease_ran_out_still_counts_if_nobody_else_got_it(
    leased: AckStore, engine: Engine, clock: Clock
) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    _submit_live(leased, "c1")
    (message,) = leased.pull("app", lease="1s")
    clock.advance(60)
    ack = with_token(ack_message("c1", LABEL, 200, channel="live"), message["headers"]["ack-token"])
    assert leased.acknowledge("app", ack) == {"status": 204}
    assert _counted(engine, "c1") == [("app", 200, "counted")]
    assert leased.pull("app") == []


def test_an_ack_without_a_token_is_checked_by_its_label_alone(leased: AckStore, engine: Engine) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    _submit_live(leased, "c1")
    leased.pull("app")
    assert leased.acknowledge("app", ack_message("c1", LABEL, 200, channel="live")) == {"status": 204}
    assert leased.acknowledge("app", ack_message("c1", "audit:undeclared", channel="live"))["status"] == 400
    assert _counted(engine, "c1") == [("app", 200, "counted")]


def test_a_decided_signal_is_not_handed_out_again(leased: AckStore, engine: Engine, clock: Clock) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    _submit_live(leased, "c1")
    leased.pull("app")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO request_results (signal_id, attempt, status, headers, cause, batch_id) "
                          "SELECT id, 1, 408, '{}', 'deadline', 0 FROM signals"))
    clock.advance(31)
    assert leased.pull("app") == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM deliveries WHERE done_at IS NULL")).scalar_one() == 0


def test_pull_rejects_bad_input(leased: AckStore) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    for call, error in [
        (lambda: leased.pull("nobody"), "acknowledgement:subscriber.notfound"),
        (lambda: leased.pull("app", max=0), "acknowledgement:pull.max.invalid"),
        (lambda: leased.pull("app", lease="forever"), "acknowledgement:lease.invalid"),
    ]:
        with pytest.raises(Exception) as raised:
            call()
        assert raised.value.to_json()["error"] == error  # type: ignore[attr-defined]


# --- live responses ------------------------------------------------------------------------------


def test_the_first_live_response_fulfils_live_response(leased: AckStore, engine: Engine) -> None:
    leased.declare("responder", [], channels=["live"])
    assert leased.submit(live_message("c1"))["status"] == 202  # defaults: response-required, live-response
    (message,) = leased.pull("responder")
    assert "requested-acks" not in message["headers"]  # only live-response was requested: a built-in
    assert message["headers"]["response-required"] is True
    token = message["headers"]["ack-token"]
    assert leased.respond("responder", live_response("c1", 200, "yes", token=token)) == {"status": 204}
    assert leased.respond("responder", live_response("c1", 500, "again")) == {"status": 204}
    assert _counted(engine, "c1", "live-response") == [("responder", 200, "counted"), ("responder", 500, "duplicate")]
    with engine.connect() as conn:
        assert conn.execute(select(command_responses.c.status)).scalar_one() == 200


@pytest.mark.parametrize(
    ("subscriber", "response", "status", "error"),
    [
        ("twin-only", live_response("c1"), 403, "acknowledgement:live.response.forbidden"),
        ("nobody", live_response("c1"), 404, "acknowledgement:subscriber.notfound"),
        ("responder", live_response("unknown"), 404, "acknowledgement:request.notfound"),
        ("responder", live_response("twin-1"), 400, "acknowledgement:live.response.invalid"),
        # never handed the signal: forbidden, whatever it says (decisions #40)
        ("responder", live_response("c1", thing="org.acme/other"), 403, "acknowledgement:live.response.forbidden"),
        ("responder", live_response("c1"), 403, "acknowledgement:live.response.forbidden"),
        ("responder", {**live_response("c1"), "topic": "org.acme/lamp-1/things/twin/commands/modify"}, 400,
         "things.protocol.adapter:unknown.topicpath"),
        ("responder", {k: v for k, v in live_response("c1").items() if k != "status"}, 400, "json.field.missing"),
    ],
)
def test_bad_live_responses_are_errors_and_store_nothing(
    leased: AckStore, engine: Engine, subscriber: str, response: dict, status: int, error: str
) -> None:
    leased.declare("responder", [], channels=["live"])
    leased.declare("twin-only", [], channels=["twin"])
    leased.submit(live_message("c1"))
    leased.submit(twin_command(correlation_id="twin-1"))
    answer = leased.respond(subscriber, response)
    assert answer["status"] == status and answer["error"] == error, answer
    assert set(answer) >= {"status", "error", "message", "description"}
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(acks)).scalar_one() == 0


# --- twin events ---------------------------------------------------------------------------------


@pytest.mark.spark
def test_twin_events_are_pulled_from_the_log_in_the_shape_subscribers_filter(
    leased: AckStore, engine: Engine, run_pipeline
) -> None:
    leased.declare("early", [], channels=["twin"])
    leased.declare("app", [LABEL], channels=["twin"], filter="gt(attributes/floor,2)")
    for thing, floor, cid in (("org.acme/a", 5, "high"), ("org.acme/b", 1, "low")):
        leased.submit(twin_command(thing=thing, path="/", value={"attributes": {"floor": floor}}, correlation_id=cid,
                                   requested_acks=["twin-persisted", LABEL]))
    run_pipeline("apply_twin")
    leased.declare("late", [], channels=["twin"])  # a new subscription starts at the end of the log

    (event,) = leased.pull("app")
    assert event["topic"] == "org.acme/a/things/twin/events/created"
    assert event["path"] == "/" and event["value"] == {"attributes": {"floor": 5}} and event["revision"] == 1
    assert event["headers"]["requested-acks"] == [LABEL]  # custom labels only (B.1)
    assert [e["headers"]["correlation-id"] for e in leased.pull("early")] == ["high", "low"]
    assert leased.pull("late") == []
    ack = with_token(ack_message("high", LABEL, 200, thing="org.acme/a"), event["headers"]["ack-token"])
    assert leased.acknowledge("app", ack) == {"status": 204}
    assert _counted(engine, "high") == [("app", 200, "counted")]
    with engine.connect() as conn:  # "early" declared no label the events ask for: nothing to await
        pending = conn.execute(text("SELECT subscriber_id FROM deliveries WHERE done_at IS NULL")).scalars().all()
    assert pending == []


def test_the_cli_pulls_and_responds(leased: AckStore, database_url: str, tmp_path) -> None:
    leased.declare("responder", [], channels=["live"])
    leased.submit(live_message("c1"))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ackstore.cli", "--database-url", database_url, *args],
                              capture_output=True, text=True, timeout=120)

    pulled = cli("pull", "responder", "--max", "10", "--lease", "1m")
    assert pulled.returncode == 0, pulled.stderr
    (line,) = pulled.stdout.splitlines()
    message = json.loads(line)
    response = tmp_path / "response.json"
    response.write_text(json.dumps(live_response("c1", token=message["headers"]["ack-token"])))
    responded = cli("respond", "responder", str(response))
    assert responded.returncode == 0 and json.loads(responded.stdout) == {"status": 204}
    refused = cli("pull", "nobody")
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"] == "acknowledgement:subscriber.notfound"


def test_show_lists_who_was_handed_the_signal(leased: AckStore, clock: Clock) -> None:
    leased.declare("app", [LABEL], channels=["live"])
    _submit_live(leased, "c1")
    leased.pull("app", lease="10s")
    clock.advance(11)
    (message,) = leased.pull("app", lease="10s")
    (shown,) = leased.stored_signal("c1")["deliveries"]
    assert shown["subscriber"] == "app" and shown["deliveryCount"] == 2 and shown["answered"] is False
    leased.acknowledge("app", with_token(ack_message("c1", LABEL, 200, channel="live"), message["headers"]["ack-token"]))
    (shown,) = leased.stored_signal("c1")["deliveries"]
    assert shown["answered"] is True and shown["doneAt"] is not None and shown["leasedUntil"] is None
