"""What a hostile login can no longer do (issue 37): forge another login's answers, join or settle
another login's connection, or stall another login's work; nor (issue 50) take a connection id an
operator did not reserve for it, or store a signal of a shape ingestion never takes. Each
reproduction of the issues, run as the logins it names — two ordinary ingest logins (``a``,
``b``), the reporter — is refused with every table unchanged, or finishes in seconds where it stalled.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger.database import make_engine
from ackstore.ledger.store import AckStore
from tests.support.ledger import ack_message, snapshot, twin_command
from tests.support.live_signals import live_message, live_response
from tests.support.logins import as_login, logins, two_logins  # noqa: F401 — logins and two_logins are fixtures
from tests.support.paths import ROOT
from tests.support.refusals import REFUSALS, refusal

CONNECTION = "plantx"  # a's connection
LABEL = "plantx:checked"


@pytest.fixture()
def logins_a_b(engine: Engine, database_url: str, two_logins) -> Iterator[tuple[AckStore, AckStore]]:  # noqa: F811
    a, b = (AckStore.connect(as_login(database_url, login)) for login in two_logins)
    yield a, b
    a.close()
    b.close()


@pytest.fixture()
def reporter(database_url: str, logins) -> Iterator[Engine]:  # noqa: F811
    engine = make_engine(as_login(database_url, logins["ackstore_reporter"]))
    yield engine
    engine.dispose()


def _signal(engine: Engine, correlation_id: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT id FROM signals WHERE correlation_id = :c"), {"c": correlation_id}).scalar_one()


def _everything(engine: Engine) -> dict[str, Any]:
    """Every ledger table, and the intake's staging table."""
    with engine.connect() as conn:
        staged = sorted(map(repr, conn.execute(text("SELECT * FROM stage_signals"))))
    return {**snapshot(engine), "stage_signals": staged}


@pytest.fixture()
def scene(engine: Engine, store: AckStore, logins_a_b, two_logins) -> dict[str, Any]:  # noqa: F811
    """a owns the connection plantx, which the operator reserved for it (its subscriber plantx-main
    issues plantx:checked) and the live subscriber a-live; b owns b-live (every namespace, never
    pulled), b-other (another namespace) and b-own (label b:done). c1 came through plantx; l1 is a
    live message handed to a-live."""
    a, b = logins_a_b
    assert store.reserve_connection(CONNECTION, two_logins[0]) == {"status": 204}
    assert a.declare("plantx-main", [LABEL], connection=CONNECTION) == {"status": 204}
    assert a.declare("a-live", [], channels=["live"]) == {"status": 204}
    assert b.declare("b-live", [], channels=["live"]) == {"status": 204}
    assert b.declare("b-other", [], channels=["live"], namespaces=["org.other"]) == {"status": 204}
    assert b.declare("b-own", ["b:done"]) == {"status": 204}
    (c1,) = a.ingest([twin_command("create", path="/", value={}, correlation_id="c1",
                                   requested_acks=["twin-persisted", LABEL])],
                     api="connectivity", source=CONNECTION, source_message_ids=["m1"])
    assert c1.ok
    assert store.submit(live_message("l1", requested_acks=["live-response"]))["status"] == 202
    (handed,) = a.pull("a-live")
    return {"a": a, "b": b, "c1": _signal(engine, "c1"), "l1": _signal(engine, "l1"), "token": handed}


def _decided(engine: Engine, signal: int, decision: str) -> None:
    """The pipeline's decision for attempt 1 of ``signal``, as its settle step writes one."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO request_results (signal_id, attempt, status, cause, batch_id) "
                          "VALUES (:s, 1, 408, 'deadline', 0)"), {"s": signal})
        conn.execute(text("INSERT INTO settlements (signal_id, attempt, decision) VALUES (:s, 1, :d)"),
                     {"s": signal, "d": decision})


# --- the table, row by row ------------------------------------------------------------


def test_a_live_response_only_from_a_subscriber_handed_the_signal(engine: Engine, scene) -> None:
    """b-live matched l1 (a hand-out row waits for it) but was never handed it; b-other does not
    receive l1 at all: neither stores a live response, counted or not, through the function."""
    b, l1 = scene["b"], scene["l1"]
    for issuer in ("b-live", "b-other"):
        for disposition in ("counted", "duplicate"):
            before = _everything(engine)
            forged = ("SELECT store_ack(:l1, 1, 'live-response', 200::smallint, '{\"forged\": true}', '{}', :issuer, "
                      ":disposition, NULL); SELECT store_live_response(:l1)")
            assert refusal(b.engine, forged, {"l1": l1, "issuer": issuer, "disposition": disposition}) == "42501"
            assert _everything(engine) == before
    assert b.respond("b-live", live_response("l1"))["status"] == 403  # the API said so already
    a = scene["a"]  # the subscriber that was handed it answers
    token = scene["token"]["headers"]["ack-token"]
    assert a.respond("a-live", live_response("l1", 418, "tea", token=token)) == {"status": 204}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT status, payload FROM command_responses")).one() == (418, "tea")


def test_no_login_joins_another_logins_connection(engine: Engine, scene) -> None:
    b = scene["b"]
    before = _everything(engine)
    answer = b.declare("evil", [LABEL], connection=CONNECTION)
    assert answer["status"] == 403 and answer["error"] == "connectivity:connection.forbidden"
    assert b.declare("evil", ["plantx:other"], connection=CONNECTION)["status"] == 403  # not with other labels either
    with b.engine.begin() as conn:  # the function itself: nothing declared
        assert conn.execute(text("SELECT declare_subscriber('evil', :c, NULL, NULL, '{twin}', :l)"),
                            {"c": CONNECTION, "l": [LABEL]}).scalar() is None
    assert b.acknowledge("evil", ack_message("c1", LABEL))["status"] == 400  # evil declared nothing
    assert refusal(b.engine, "SELECT store_ack(:c1, 1, :l, 200::smallint, NULL, '{}', 'plantx-main', 'counted', NULL)",
                   {"c1": scene["c1"], "l": LABEL}) == "42501"
    assert _everything(engine) == before
    assert scene["a"].acknowledge("plantx-main", ack_message("c1", LABEL)) == {"status": 204}


def test_no_login_stores_or_settles_another_logins_connections_messages(engine: Engine, scene) -> None:
    b, c1 = scene["b"], scene["c1"]
    before = _everything(engine)
    for api in ("connectivity", "http"):  # whatever API it names: a's message id taken first would make
        answers = b.submit_many([twin_command(correlation_id="c9")], api=api, source=CONNECTION,  # a's own message
                                source_message_ids=["m2"])                                      # a retransmission
        assert answers[0]["status"] == 403 and answers[0]["error"] == "connectivity:connection.forbidden", api
        assert b.submit(twin_command(correlation_id="c9"), api=api, source=CONNECTION)["status"] == 403
    assert _everything(engine) == before
    _decided(engine, c1, "ack")
    before = _everything(engine)
    for sql in ("SELECT * FROM record_carried_out(ARRAY[:c1]::bigint[], '{1}', false, 'reject')",
                "SELECT * FROM record_carried_out(ARRAY[:c1]::bigint[], '{1}', true, NULL)",
                "SELECT * FROM record_latest_carried_out(ARRAY[:c1]::bigint[])"):
        assert refusal(b.engine, sql, {"c1": c1}) == "42501", sql
    assert _everything(engine) == before
    a = scene["a"]  # its own login may, and only as a transport could carry the decision out
    assert refusal(a.engine, "SELECT * FROM record_carried_out(ARRAY[:c1]::bigint[], '{1}', false, 'reject')",
                   {"c1": c1}) == "23514"
    assert _everything(engine) == before
    assert refusal(a.engine, "SELECT * FROM record_carried_out(ARRAY[:c1]::bigint[], '{1}', false, NULL)", {"c1": c1}) is None


def test_a_next_attempt_carries_no_subscribers_ack_and_only_the_connections_login_opens_it(engine: Engine,
                                                                                          scene) -> None:
    a, b, c1 = scene["a"], scene["b"], scene["c1"]
    _decided(engine, c1, "redeliver")
    assert a.acknowledge("plantx-main", ack_message("c1", LABEL)) == {"status": 204}  # late: decided already
    before = _everything(engine)
    opened = "SELECT open_next_attempt(:c1, 2, :labels)"
    assert refusal(b.engine, opened, {"c1": c1, "labels": [LABEL]}) == "42501"
    assert _everything(engine) == before
    for labels in (["twin-persisted", LABEL, "b:done"], [LABEL], [], ["twin-persisted"]):  # more, or dropping one
        assert refusal(a.engine, opened, {"c1": c1, "labels": labels}) == "23514", labels
    assert _everything(engine) == before
    assert refusal(a.engine, opened, {"c1": c1, "labels": ["twin-persisted", LABEL]}) is None  # what did not succeed
    with engine.connect() as conn:
        carried = conn.execute(text("SELECT count(*) FROM acks WHERE attempt = 2")).scalar_one()
        requested = conn.execute(text("SELECT requested_acks FROM attempts WHERE attempt = 2")).scalar_one()
    assert carried == 0 and requested == ["twin-persisted", LABEL]  # the late ack of attempt 1 does not count


def test_a_live_hand_out_is_only_of_this_transactions_signal_to_its_namespace(engine: Engine, scene) -> None:
    b, l1 = scene["b"], scene["l1"]
    before = _everything(engine)
    for subscriber in ("a-live", "b-live", "b-other"):
        rows = json.dumps([{"subscriber_id": subscriber, "signal_id": l1, "token_key": "00" * 16}])
        assert refusal(b.engine, "SELECT hand_out_live(CAST(:rows AS json))", {"rows": rows}) in REFUSALS, subscriber
    assert _everything(engine) == before
    # a signal of its own transaction: to the live subscribers of its namespace, under keys drawn in SQL
    assert b.submit(live_message("l2", thing="org.acme/lamp-2"))["status"] == 202
    with engine.connect() as conn:
        handed = conn.execute(text("SELECT d.subscriber_id, length(d.token_key) FROM deliveries d "
                                   "JOIN signals s ON s.id = d.signal_id WHERE s.correlation_id = 'l2' "
                                   "ORDER BY 1")).all()
    assert [subscriber for subscriber, _ in handed] == ["a-live", "b-live", "b-own", "plantx-main"]  # not b-other
    assert {length for _, length in handed} == {64}


def test_a_live_hand_out_outside_the_subscribers_filter_is_never_handed_to_it(engine: Engine, store: AckStore,
                                                                             scene) -> None:
    """A submitting login's fan-out decides the filter in its own process; the subscriber's own
    pull checks it again (the database cannot), so a hand-out forged past it is closed, not handed."""
    a = scene["a"]
    assert a.declare("a-filtered", [], channels=["live"], filter='eq(topic:action,"wanted")') == {"status": 204}
    assert store.submit(live_message("l3", subject="unwanted"))["status"] == 202
    with engine.begin() as conn:  # what a hostile fan-out adds past the filter: a-filtered's namespace is any
        conn.execute(text("INSERT INTO deliveries (subscriber_id, signal_id, token_key, handouts, available_at) "
                          "VALUES ('a-filtered', :s, 'k', 0, '-infinity')"), {"s": _signal(engine, "l3")})
    assert a.pull("a-filtered") == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT done_at IS NOT NULL FROM deliveries WHERE subscriber_id = 'a-filtered'")).scalar()
    assert store.submit(live_message("l4", subject="wanted"))["status"] == 202  # what it does receive
    assert [m["headers"]["correlation-id"] for m in a.pull("a-filtered")] == ["l4"]


# --- a connection only for the login granted it (issue 50) ----------------------------------------


def test_a_connection_id_is_claimed_only_by_the_login_an_operator_reserved_it_for(
        engine: Engine, store: AckStore, logins_a_b, two_logins, reporter: Engine) -> None:  # noqa: F811
    """The issue's row: b claims a's connection id first, before a's connector first starts —
    which then exited. Now b takes nothing, and the operator's reservation makes it a's."""
    a, b = logins_a_b
    before = _everything(engine)
    with b.engine.begin() as conn:
        assert conn.execute(text("SELECT claim_connection('plant-y')")).scalar_one() is False
    assert b.claim_connection("plant-y")["error"] == "connectivity:connection.forbidden"
    assert b.declare("b-y", ["plant-y:done"], connection="plant-y")["status"] == 403
    assert b.submit(twin_command(correlation_id="y1"), api="connectivity", source="plant-y")["status"] == 403
    for who in (b.engine, reporter):  # nor does a login reserve one for itself (or for another)
        for login in two_logins:
            assert refusal(who, "SELECT reserve_connection('plant-y', :login)", {"login": login}) == "42501"
    assert _everything(engine) == before
    assert store.reserve_connection("plant-y", two_logins[0]) == {"status": 204}  # the operator's grant
    assert a.claim_connection("plant-y") == {"status": 204}  # what a's connector does when it starts
    assert b.claim_connection("plant-y")["status"] == 403
    assert store.reserve_connection("plant-y", two_logins[1])["status"] == 409  # it stays a's
    assert store.reserve_connection("plant-y", two_logins[0]) == {"status": 204}  # again: nothing changes
    assert a.submit(twin_command(correlation_id="y2"), api="connectivity", source="plant-y")["status"] == 202


def test_the_reserved_login_s_connector_starts_after_another_login_tried_its_id_first(
        engine: Engine, store: AckStore, database_url: str, logins_a_b, two_logins) -> None:  # noqa: F811
    """A real connector (``ackstore connect amqp --once``) run as a, after b asked for its id first."""
    from tests.support.broker import Broker, connector, publish_all

    a, b = logins_a_b
    assert b.claim_connection("plant-z")["status"] == 403
    assert store.reserve_connection("plant-z", two_logins[0]) == {"status": 204}
    broker = Broker()
    try:
        queue = broker.queue("commands")
        publish_all(broker, queue, [twin_command(correlation_id="z1")])
        process = connector(as_login(database_url, two_logins[0]), "--connection-id", "plant-z", "--queue", queue,
                            "--once")
        _, log = process.communicate(timeout=120)
    finally:
        broker.close()
    assert process.returncode == 0, log
    with engine.connect() as conn:
        assert conn.execute(text("SELECT source FROM signals WHERE correlation_id = 'z1'")).scalar_one() == "plant-z"


def test_a_connection_nobody_reserved_is_claimed_by_first_use_only_by_a_login_that_may_reserve(
        engine: Engine, store: AckStore, logins_a_b) -> None:
    """The admin role's login (the tests' own: a superuser) owns the table anyway; its connectors and
    the demo's claim their connections as before."""
    assert store.claim_connection("plant-own") == {"status": 204}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT owner_login = session_user FROM connections WHERE id = 'plant-own'")).scalar()
    assert logins_a_b[0].claim_connection("plant-own")["status"] == 403


# --- a signal only of a shape ingestion takes (issue 50) -------------------------------------------

# (channel, kind, action) ingestion's Python never stores (envelopes.SIGNAL_SHAPES): each refused by
# the table's CHECK, whichever write function stores it.
BAD_SHAPES = {
    "an unknown action": ("twin", "twin-command", "bogus"),
    "an empty action": ("twin", "twin-command", ""),
    "a twin retrieve": ("twin", "twin-command", "retrieve"),
    "a twin command on the live channel": ("live", "twin-command", "modify"),
    "a live command on the twin channel": ("twin", "live-command", "modify"),
    "a live command's unknown action": ("live", "live-command", "bogus"),
    "a live message without a subject": ("live", "live-message", ""),
    "a live message on the twin channel": ("twin", "live-message", "ask"),
    "an unknown kind": ("twin", "twin-event", "modify"),
    "an unknown channel": ("both", "twin-command", "modify"),
}
INSERT_SIGNAL = ("SELECT insert_signal('api', :m, :m, 'http', :channel, :kind, :action, 'org.acme:lamp-1', "
                 "'org.acme/lamp-1/things/twin/commands/modify', '/attributes/x', '1', '{}', '{}', false, 60000)")
MERGE_STAGED = ("INSERT INTO stage_signals (ord, source, api, source_message_id, correlation_id, channel, kind, "
                "action, thing_id, topic, path, headers, requested_acks, response_required, timeout_ms) VALUES "
                "(0, 'api', 'http', :m, :m, :channel, :kind, :action, 'org.acme:lamp-1', "
                "'org.acme/lamp-1/things/twin/commands/modify', '/attributes/x', '{}', '{}', false, 60000); "
                "SELECT * FROM merge_staged_signals(false)")


@pytest.mark.parametrize("sql", [INSERT_SIGNAL, MERGE_STAGED], ids=["insert_signal", "merge_staged_signals"])
@pytest.mark.parametrize("shape", list(BAD_SHAPES))
def test_no_write_function_stores_a_signal_of_a_shape_ingestion_refuses(engine: Engine, logins_a_b, sql: str,
                                                                         shape: str) -> None:
    channel, kind, action = BAD_SHAPES[shape]
    before = _everything(engine)
    given = {"m": "bad", "channel": channel, "kind": kind, "action": action}
    assert refusal(logins_a_b[1].engine, sql, given) == "23514"
    assert _everything(engine) == before
    good = {"m": "good", "channel": "twin", "kind": "twin-command", "action": "modify"}  # what ingestion stores
    assert refusal(logins_a_b[1].engine, sql, good) is None


# --- every write function, called directly by another ingest login and by the reporter ---------


def _calls(scene: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """One call of each write function (docs/roles.md) aimed at a's subscribers, connection and signals."""
    c1, l1 = scene["c1"], scene["l1"]
    staged = ("INSERT INTO stage_signals (ord, source, api, source_message_id, correlation_id, channel, kind, action, "
              "thing_id, topic, path, headers, requested_acks, response_required, timeout_ms) VALUES (0, :c, "
              "'connectivity', 'm9', 'c9', 'twin', 'twin-command', 'modify', 'org.acme:lamp-1', "
              "'org.acme/lamp-1/things/twin/commands/modify', '/attributes/x', '{}', '{}', false, 60000); ")
    events = json.dumps([{"subscriber_id": "a-live", "signal_id": c1, "attempt": 1, "event_id": 1, "token_key": "k",
                          "available_at": "2000-01-01T00:00:00Z", "leased_at": "2000-01-01T00:00:00Z"}])
    return {
        "merge_staged_signals": (staged + "SELECT * FROM merge_staged_signals(false)", {"c": CONNECTION}),
        "insert_signal": ("SELECT insert_signal(:c, 'm9', 'c9', 'http', 'twin', 'twin-command', 'modify', "
                          "'org.acme:lamp-1', 'org.acme/lamp-1/things/twin/commands/modify', '/attributes/x', '1', "
                          "'{}', '{}', false, 60000)", {"c": CONNECTION}),
        "hand_out_live": ("SELECT hand_out_live(CAST(:rows AS json))",
                          {"rows": json.dumps([{"subscriber_id": "a-live", "signal_id": l1}])}),
        "lock_retransmitted": ("SELECT lock_retransmitted(:c, '{m1}')", {"c": CONNECTION}),
        "retransmitted": ("SELECT * FROM retransmitted(:c, 'm1')", {"c": CONNECTION}),
        "open_next_attempt": ("SELECT open_next_attempt(:c1, 2, :labels)", {"c1": c1, "labels": ["twin-persisted", LABEL]}),
        "lock_request": ("SELECT * FROM lock_request('c1')", {}),
        "store_ack": ("SELECT store_ack(:c1, 1, :l, 500::smallint, NULL, '{}', 'plantx-main', 'counted', NULL)",
                      {"c1": c1, "l": LABEL}),
        "store_live_response": ("SELECT store_live_response(:l1)", {"l1": l1}),
        "lock_handout": ("SELECT * FROM lock_handout('a-live', :l1)", {"l1": l1}),
        "answer_handout": ("SELECT answer_handout('a-live', :l1, 1, '{live-response}', NULL)", {"l1": l1}),
        "close_handout": ("SELECT close_handout('a-live', :l1, NULL)", {"l1": l1}),
        "close_decided_handouts": ("SELECT close_decided_handouts('a-live', now())", {}),
        "lease_ready": ("SELECT * FROM lease_ready('a-live', 'infinity', 10, 1000)", {}),
        "lock_event_position": ("SELECT lock_event_position('a-live')", {}),
        "move_event_position": ("SELECT move_event_position('a-live', 1000)", {}),
        "hand_out_events": ("SELECT * FROM hand_out_events(CAST(:rows AS json))", {"rows": events}),
        "close_handouts": ("SELECT close_handouts('a-live', ARRAY[:l1]::bigint[], now())", {"l1": l1}),
        "declare_subscriber": ("SELECT declare_subscriber('a-live', :c, NULL, NULL, '{live}', '{}')",
                               {"c": CONNECTION}),
        "may_act_for": ("SELECT may_act_for('a-live')", {}),
        "may_act_for_connection": ("SELECT may_act_for_connection(:c)", {"c": CONNECTION}),
        "claim_connection": ("SELECT claim_connection(:c)", {"c": CONNECTION}),
        "record_carried_out": ("SELECT * FROM record_carried_out(ARRAY[:c1]::bigint[], '{1}', true, NULL)", {"c1": c1}),
        "record_latest_carried_out": ("SELECT * FROM record_latest_carried_out(ARRAY[:c1]::bigint[])", {"c1": c1}),
        "log_connection_event": ("SELECT log_connection_event(:c, 'dropped', 'forged', NULL, NULL)", {"c": CONNECTION}),
        "connector_seen": ("SELECT connector_seen(:c, now())", {"c": CONNECTION}),  # a forged outage (issue 50)
        "connector_stopped": ("SELECT connector_stopped(:c)", {"c": CONNECTION}),  # a forged clean stop (#133)
    }


WRITE_FUNCTIONS = sorted(_calls({"c1": 0, "l1": 0}))
# Those that refuse b, and how: 42501 is another login's subscriber or connection; hand_out_live
# refuses a signal of another transaction whoever's subscriber it names (23514). The others —
# reads, a's request share-locked as any ack does, questions about itself — run and change nothing.
REFUSED_TO_ANOTHER_LOGIN = {"merge_staged_signals": "42501", "insert_signal": "42501", "hand_out_live": "23514",
                            "lock_retransmitted": "42501", "retransmitted": "42501", "open_next_attempt": "42501",
                            "store_ack": "42501", "lock_handout": "42501", "answer_handout": "42501",
                            "close_handout": "42501", "close_decided_handouts": "42501", "lease_ready": "42501",
                            "lock_event_position": "42501", "move_event_position": "42501",
                            "hand_out_events": "42501", "close_handouts": "42501", "record_carried_out": "42501",
                            "record_latest_carried_out": "42501", "log_connection_event": "42501",
                            "connector_seen": "42501", "connector_stopped": "42501"}


def test_the_write_function_table_is_every_function_the_ingest_role_may_call(engine: Engine) -> None:
    from tests.support import catalog_privileges

    with engine.connect() as conn:
        granted = {name for role, privilege, name in catalog_privileges.granted(conn)
                   if role == "ackstore_ingest" and privilege == "EXECUTE"}
    assert granted == set(WRITE_FUNCTIONS)


@pytest.mark.parametrize("function", WRITE_FUNCTIONS)
def test_another_ingest_login_changes_nothing_of_anothers(engine: Engine, scene, function: str) -> None:
    _decided(engine, scene["c1"], "redeliver")
    sql, params = _calls(scene)[function]
    before = _everything(engine)
    assert refusal(scene["b"].engine, sql, params) == REFUSED_TO_ANOTHER_LOGIN.get(function)
    assert _everything(engine) == before


@pytest.mark.parametrize("function", WRITE_FUNCTIONS)
def test_the_reporter_may_call_no_write_function(engine: Engine, scene, reporter: Engine, function: str) -> None:
    sql, params = _calls(scene)[function]
    before = _everything(engine)
    assert refusal(reporter, sql, params) == "42501"
    assert _everything(engine) == before


# --- no login stalls another ------------------------------------------------------------------


def _finishes_within(seconds: float, work: Callable[[], Any]) -> Any:
    """``work``'s result, asserting it ends within ``seconds`` (a stall would hang it for good)."""
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(work()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert done, f"still waiting after {seconds} s"
    return done[0]


def test_no_lock_the_ledger_waits_for_is_an_advisory_lock(engine: Engine) -> None:
    """Any login may take any advisory lock (the reporter's too), so none of the ledger's functions
    and none of the statements the components run takes one (issue 37)."""
    from pathlib import Path

    with engine.connect() as conn:
        functions = conn.execute(text("SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                                      "WHERE n.nspname = 'public' AND p.prosrc ILIKE '%advisory%'")).scalars().all()
    root = ROOT
    statements = [str(path.relative_to(root)) for top in ("ackstore", "jobs", "dags")
                  for path in (root / top).rglob("*") if path.suffix in (".sql", ".py") and "superseded" not in path.parts
                  and "pg_advisory" in path.read_text()]
    assert functions == [] and statements == []


ADVISORY = ["pg_advisory_lock(hashtext('ackstore.declare'))", "pg_advisory_lock(1, hashtext('org.acme:lamp-1'))",
            "pg_advisory_lock(hashtext('ackstore.facts'))", "pg_advisory_lock(hashtext('ackstore.seal'))",
            "pg_advisory_lock(hashtext('ackstore.pipeline.apply_twin'))"]


@pytest.mark.spark
def test_the_reporter_holding_the_old_advisory_locks_stalls_nobody(engine: Engine, scene, reporter: Engine,
                                                                   run_pipeline) -> None:
    """The issue's reproduction: the reporter takes the advisory locks declare and submit waited
    for (and the steps' and the sealer's); a declaration, a submission of that thing and a
    pipeline pass go through."""
    a = scene["a"]
    with reporter.connect() as holder:
        for lock in ADVISORY:
            holder.execute(text(f"SELECT {lock}"))
        assert _finishes_within(20, lambda: a.declare("a-more", ["a:more"]))["status"] == 204
        assert _finishes_within(20, lambda: a.submit(twin_command(correlation_id="c5")))["status"] == 202
        assert "apply_twin" in _finishes_within(60, lambda: run_pipeline("apply_twin"))
        holder.execute(text("SELECT pg_advisory_unlock_all()"))


@pytest.mark.parametrize("lock", ["lock_things('{org.acme:lamp-1}')", "lock_step('sweep')", "lock_facts(true)",
                                  "lock_sealer()", "seal_position()"])
def test_no_login_takes_the_writers_or_the_steps_locks(engine: Engine, reporter: Engine, logins_a_b, lock: str) -> None:
    assert refusal(reporter, f"SELECT {lock}") == "42501"
    assert refusal(logins_a_b[1].engine, f"SELECT {lock}") == "42501"


@pytest.mark.spark
def test_abandoned_staged_signals_are_removed_by_the_pipeline(engine: Engine, scene, run_pipeline) -> None:
    """b COPYs rows into the intake's staging table and commits without merging them."""
    b = scene["b"]
    with b.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO stage_signals (ord, source, api, source_message_id, correlation_id, channel, kind, action, "
            "thing_id, topic, path, headers, requested_acks, response_required, timeout_ms) "
            "SELECT g, 'api', 'http', 'm' || g, 'x' || g, 'twin', 'twin-command', 'modify', 'org.acme:lamp-1', "
            "'org.acme/lamp-1/things/twin/commands/modify', '/attributes/x', '{}', '{}', false, 60000 "
            "FROM generate_series(1, 2000) g"))
    stats = run_pipeline("apply_twin")
    assert stats["apply_twin"]["abandoned_staged_signals"] == 2000
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM stage_signals")).scalar_one() == 0


@pytest.mark.spark
def test_an_idle_transaction_stalls_neither_the_pipeline_nor_another_logins_ack(engine: Engine, scene,
                                                                               run_pipeline) -> None:
    """b stores an ack and leaves its transaction open: the sweep waits at most its lock timeout
    and defers, and a's acks meanwhile wait at most about as long (the issue's stall lasted as
    long as the idle transaction: 107 s)."""
    a, b = scene["a"], scene["b"]
    holder = b.engine.connect()
    try:
        holder.execute(text("SELECT store_ack(:c1, 1, 'b:done', 200::smallint, NULL, '{}', 'b-own', 'unrequested', "
                            "NULL)"), {"c1": scene["c1"]})
        submitted = [a.submit(twin_command(correlation_id=f"w{n}", requested_acks=["a:w"], timeout="1s"))
                     for n in range(3)]
        assert all(answer["status"] == 202 for answer in submitted)
        assert a.declare("a-w", ["a:w"]) == {"status": 204}
        time.sleep(1.2)  # their deadlines pass: the sweep's Spark pass decides them (408)
        waits: list[float] = []
        stop = threading.Event()

        def acking() -> None:
            while not stop.is_set():
                started = time.monotonic()
                a.acknowledge("a-w", ack_message("w0", "a:w"))
                waits.append(time.monotonic() - started)
                time.sleep(0.1)

        acker = threading.Thread(target=acking, daemon=True)
        acker.start()
        try:
            started = time.monotonic()
            stats = _finishes_within(120, lambda: run_pipeline("apply_twin", "index_search", "sweep",
                                                               lock_timeout_ms=1000))
            took = time.monotonic() - started
        finally:
            stop.set()
            acker.join(30)
        assert waits and max(waits) < 5, waits  # the lock timeout is 1 s
        assert stats["sweep"].get("deferred_by_lock") is True and stats["sweep"]["decided"] == 0, stats["sweep"]
        assert took < 100
        with engine.connect() as conn:  # nothing the deferred merge did is kept: the work is still queued
            assert conn.execute(text("SELECT count(*) FROM queue_decide")).scalar_one() >= 3
    finally:
        holder.rollback()
        holder.close()
    assert run_pipeline("sweep")["sweep"]["decided"] >= 3  # the next pass decides what was deferred
