"""What no role may write, the database refuses (issue 26; decisions #94–#96): the forgeries a
hostile probe made as a component's login, run again as that login and as a superuser, each
refused with nothing stored; and the pipeline goes on for the other signals.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger.database import make_engine
from ackstore.ledger.store import AckStore
from tests.support.ledger import ack_message, twin_command
from tests.support.live_signals import live_message
from tests.support.logins import as_login, logins  # noqa: F401 — logins is a fixture
from tests.support.refusals import REFUSALS, refusal

LEDGER = ("signals", "attempts", "acks", "command_responses", "request_results", "settlements", "subscribers",
          "declared_labels", "deliveries", "queue_apply", "queue_decide", "stage_signals")


@pytest.fixture()
def ingest(database_url: str, logins) -> Iterator[Engine]:  # noqa: F811
    engine = make_engine(as_login(database_url, logins["ackstore_ingest"]))
    yield engine
    engine.dispose()


def snapshot(engine: Engine) -> dict[str, list[tuple]]:
    with engine.connect() as conn:
        return {table: sorted(map(tuple, conn.execute(text(f"SELECT * FROM {table}"))), key=repr) for table in LEDGER}


def signal_id(engine: Engine, correlation_id: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT id FROM signals WHERE correlation_id = :c"), {"c": correlation_id}).scalar_one()


@pytest.fixture()
def ledger(engine: Engine) -> AckStore:
    """A pending twin command (t1 creates a thing, requesting twin-persisted and app:done), a live message (l1)
    for a live subscriber, the declarations."""
    store = AckStore(engine)
    assert store.declare("app", ["app:done"])["status"] == 204
    assert store.declare("responder", [], channels=["live"])["status"] == 204
    assert store.submit(twin_command("create", path="/", value={}, correlation_id="t1",
                                     requested_acks=["twin-persisted", "app:done"]))["status"] == 202
    assert store.submit(live_message("l1"))["status"] == 202
    return store


TABLE_WRITES = [
    "INSERT INTO command_responses (signal_id, status, payload, is_error) SELECT id, 500, '\"forged\"', true FROM signals",
    "INSERT INTO acks (signal_id, attempt, label, status, headers, issuer, disposition) "
    "SELECT id, 1, 'twin-persisted', 500, '{}', 'ackstore', 'counted' FROM signals",
    "INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action, thing_id, topic, path, "
    "headers, requested_acks, response_required, timeout_ms, deadline_at) SELECT source, 'x', 'x', api, channel, kind, "
    "action, thing_id, topic, path, headers, requested_acks, response_required, timeout_ms, deadline_at FROM signals LIMIT 1",
    "INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at) SELECT id, 2, '{}', now(), now() FROM signals",
    "INSERT INTO queue_apply (signal_id) VALUES (999)", "DELETE FROM queue_decide", "UPDATE queue_decide SET attempt = 9",
    "UPDATE subscribers SET holder = 'subscriber:app' WHERE id = 'responder'", "DELETE FROM declared_labels",
    "INSERT INTO declared_labels (label, holder) VALUES ('responder:x', 'subscriber:app')",
    "UPDATE deliveries SET handouts = handouts + 1", "DELETE FROM deliveries",
    "UPDATE settlements SET carried_out_at = '2000-01-01'", "UPDATE settlements SET carried_out_at = NULL",
    "UPDATE signals SET received_at = now()",
    "INSERT INTO stage_signals (batch, ord, source, api, source_message_id, correlation_id, channel, kind, action, "
    "thing_id, topic, path, headers, requested_acks, response_required, timeout_ms) "
    "VALUES (1, 0, 's', 'http', 'm', 'c', 'twin', 'twin-command', 'modify', 'a:b', 't', '/', '{}', '{}', false, 1)",
    "SELECT * FROM stage_signals",
]


@pytest.mark.parametrize("sql", TABLE_WRITES)
def test_the_ingest_login_writes_no_table_directly(engine: Engine, ledger: AckStore, ingest: Engine, sql: str) -> None:
    before = snapshot(engine)
    assert refusal(ingest, sql) == "42501"
    assert snapshot(engine) == before


def _calls(engine: Engine) -> list[tuple[str, dict]]:
    t1, l1 = signal_id(engine, "t1"), signal_id(engine, "l1")
    return [
        # a twin command's response: there is no live-response ack to take it from
        ("SELECT store_live_response(:t1)", {"t1": t1}),
        # a built-in fact as an ack, counted or not
        ("SELECT store_ack(:t1, 1, 'twin-persisted', 500::smallint, NULL, '{}', 'app', 'counted', NULL)", {"t1": t1}),
        ("SELECT store_ack(:t1, 1, 'search-persisted', 500::smallint, NULL, '{}', 'app', 'late', NULL)", {"t1": t1}),
        # a label the issuer's group did not declare; an issuer that is no subscriber
        ("SELECT store_ack(:t1, 1, 'app:done', 500::smallint, NULL, '{}', 'responder', 'counted', NULL)", {"t1": t1}),
        ("SELECT store_ack(:t1, 1, 'app:done', 500::smallint, NULL, '{}', 'nobody', 'late', NULL)", {"t1": t1}),
        # counted for an attempt that is not the current one, or for a label not requested
        ("SELECT store_ack(:t1, 2, 'app:done', 500::smallint, NULL, '{}', 'app', 'counted', NULL)", {"t1": t1}),
        ("SELECT store_ack(:l1, 1, 'app:done', 500::smallint, NULL, '{}', 'app', 'counted', NULL)", {"l1": l1}),
        # a next attempt that follows no redeliver decision
        ("SELECT open_next_attempt(:t1, 2, '{app:done}')", {"t1": t1}),
        # a twin command handed out as if live; a live signal to a twin-only subscriber
        ("SELECT hand_out_live(CAST(:rows AS json))", {"rows": f'[{{"subscriber_id": "responder", "signal_id": {t1}, "token_key": "k"}}]'}),
        ("SELECT hand_out_live(CAST(:rows AS json))", {"rows": '[{"subscriber_id": "app", "signal_id": %d, "token_key": "k"}]' % l1}),
        # a built-in label declared
        ("SELECT declare_subscriber('x', NULL, NULL, NULL, '{twin}', '{twin-persisted}')", {}),
        # a settlement recorded for a signal of no connection (t1 came through the API)
        ("SELECT record_carried_out(ARRAY[:t1]::bigint[], '{1}', true, NULL)", {"t1": t1}),
    ]


NOTHING_TO_WRITE = ("SELECT store_live_response",)  # it writes only what is there


def test_the_write_functions_refuse_what_no_caller_may_store(engine: Engine, ledger: AckStore, ingest: Engine) -> None:
    for sql, params in _calls(engine):
        before = snapshot(engine)
        outcome = refusal(ingest, sql, params)
        if sql.startswith(NOTHING_TO_WRITE):
            assert outcome is None, (sql, outcome)
        else:
            assert outcome in REFUSALS, (sql, outcome)
        assert snapshot(engine) == before, sql


def test_a_live_response_is_the_one_its_counted_ack_carries(engine: Engine, ledger: AckStore) -> None:
    """The response stored is copied from the counted live-response ack, never given apart from it."""
    (message,) = ledger.pull("responder")
    response = {"topic": message["topic"], "path": "/outbox/messages/ask", "status": 418, "value": "tea",
                "headers": {"correlation-id": "l1", "ack-token": message["headers"]["ack-token"]}}
    assert ledger.respond("responder", response) == {"status": 204}
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT r.status, r.payload, k.status, k.payload FROM command_responses r "
                                   "JOIN acks k ON k.signal_id = r.signal_id AND k.label = 'live-response'")).one()
    assert tuple(stored) == (418, "tea", 418, "tea")


BUILTIN_ROW = ("INSERT INTO acks (signal_id, attempt, label, status, headers, issuer, disposition) "
               "SELECT id, :attempt, :label, 500, '{}', 'ackstore', :disposition FROM signals WHERE correlation_id = 't1'")


@pytest.mark.parametrize("label", ["twin-persisted", "search-persisted"])
@pytest.mark.parametrize("disposition", ["counted", "late"])
def test_no_writer_stores_a_built_in_fact_as_an_ack(engine: Engine, ledger: AckStore, label: str,
                                                     disposition: str) -> None:
    """As a superuser (the pipeline's login could only be weaker): refused by the trigger."""
    before = snapshot(engine)
    assert refusal(engine, BUILTIN_ROW, {"attempt": 1, "label": label, "disposition": disposition}) == "42501"
    assert snapshot(engine) == before


def test_a_built_in_row_from_before_the_lean_ledger_may_only_be_carried_to_a_later_attempt(
        engine: Engine, ledger: AckStore) -> None:
    with engine.begin() as conn:  # a row 0007 kept, written with the trigger off
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text(BUILTIN_ROW), {"attempt": 1, "label": "twin-persisted", "disposition": "counted"})
    assert refusal(engine, BUILTIN_ROW, {"attempt": 2, "label": "twin-persisted", "disposition": "counted"}) is None
    other_status = BUILTIN_ROW.replace("500", "200")
    assert refusal(engine, other_status, {"attempt": 3, "label": "twin-persisted", "disposition": "counted"}) == "42501"
    assert refusal(engine, BUILTIN_ROW, {"attempt": 1, "label": "search-persisted", "disposition": "counted"}) == "42501"


def test_a_second_counted_ack_for_one_label_is_refused_whoever_writes(engine: Engine, ledger: AckStore) -> None:
    assert ledger.acknowledge("app", ack_message("t1", "app:done")) == {"status": 204}
    before = snapshot(engine)
    second = ("INSERT INTO acks (signal_id, attempt, label, status, headers, issuer, disposition) "
              "SELECT signal_id, attempt, label, 500, headers, issuer, disposition FROM acks WHERE label = 'app:done'")
    assert refusal(engine, second) == "23505"
    assert snapshot(engine) == before


def _settled(engine: Engine, correlation_id: str = "t1") -> int:
    """A decided settlement of the signal, written as the pipeline's settle step writes one."""
    with engine.begin() as conn:
        return conn.execute(text("INSERT INTO settlements (signal_id, attempt, decision) "
                                 "SELECT id, 1, 'ack' FROM signals WHERE correlation_id = :c RETURNING signal_id"),
                            {"c": correlation_id}).scalar_one()


@pytest.mark.parametrize("change", [
    "carried_out_at = decided_at - interval '1 second'",  # before its decision
    "decision = 'reject'", "decided_at = decided_at - interval '1 day'", "attempt = 2",
    "carried_out_as = 'reject'",  # said without being carried out
    "carried_out_at = now(), carried_out_as = 'ack'",  # the decision itself is no substitute
    "carried_out_at = now(), carried_out_as = 'nack'",  # not a settlement
])
def test_a_settlement_keeps_its_decision_and_is_never_carried_out_before_it(engine: Engine, ledger: AckStore,
                                                                          change: str) -> None:
    _settled(engine)
    before = snapshot(engine)
    assert refusal(engine, f"UPDATE settlements SET {change}") in {"42501", "23514"}
    assert snapshot(engine) == before


def test_a_copys_settlement_answers_what_it_recorded_and_only_once(engine: Engine, ledger: AckStore,
                                                                    ingest: Engine) -> None:
    """record_latest_carried_out returns the settlements it recorded with their decisions, which the
    connector counts as carried out by it (issue 50's review: it read them first, apart from the
    write, and could count one another connector recorded in between): a second copy records none."""
    from ackstore.ledger import settlements

    assert ledger.reserve_connection("plant", ingest.url.username) == {"status": 204}
    AckStore(ingest).ingest([twin_command("create", path="/", value={}, correlation_id="c1")],
                            api="connectivity", source="plant", source_message_ids=["m1"])
    signal = _settled(engine, "c1")
    with ingest.begin() as conn:
        first = settlements.record_latest(conn, [signal])
    with ingest.begin() as conn:
        again = settlements.record_latest(conn, [signal])
    assert (first, again) == (["ack"], [])
    with engine.connect() as conn:
        assert conn.execute(text("SELECT carried_out_at IS NOT NULL FROM settlements")).scalar_one()


@pytest.mark.parametrize("change", ["carried_out_at = NULL", "carried_out_at = carried_out_at + interval '1 second'",
                                    "carried_out_as = 'reject'"])
def test_a_settlement_is_carried_out_once_and_never_cleared(engine: Engine, ledger: AckStore, ingest: Engine,
                                                            change: str) -> None:
    assert ledger.reserve_connection("plant", ingest.url.username) == {"status": 204}  # the operator's (issue 50)
    (stored,) = AckStore(ingest).ingest([twin_command("create", path="/", value={}, correlation_id="c1",
                                                      requested_acks=["twin-persisted"])],
                                        api="connectivity", source="plant", source_message_ids=["m1"])
    signal = _settled(engine, "c1")  # a message of the ingest login's connection
    with ingest.begin() as conn:  # the connector records it, then settles a redelivered copy again
        first = conn.execute(text("SELECT record_carried_out(ARRAY[:s]::bigint[], '{1}', true, NULL)"), {"s": signal}).all()
    with engine.connect() as conn:
        recorded = conn.execute(text("SELECT carried_out_at FROM settlements")).scalar_one()
    with ingest.begin() as conn:
        again = conn.execute(text("SELECT record_carried_out(ARRAY[:s]::bigint[], '{1}', true, NULL)"), {"s": signal}).all()
        latest = conn.execute(text("SELECT * FROM record_latest_carried_out(ARRAY[:s]::bigint[])"),
                              {"s": signal}).all()
    assert first == again == [(signal,)]  # every held one is returned...
    assert latest == []  # ...and what a copy's settlement recorded: nothing, it was recorded
    with engine.connect() as conn:  # ...and the first record stands
        assert conn.execute(text("SELECT carried_out_at FROM settlements")).scalar_one() == recorded
    before = snapshot(engine)
    assert refusal(engine, f"UPDATE settlements SET {change}") == "42501"
    assert snapshot(engine) == before


@pytest.mark.spark
def test_the_pipeline_goes_on_after_refused_forgeries(engine: Engine, ledger: AckStore, ingest: Engine,
                                                     database_url: str, logins, spark) -> None:  # noqa: F811
    """The probe's first two forgeries stopped every later apply_twin, or told a requester its
    applied command failed; refused, the pipeline decides every signal as if they never happened."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    assert ledger.submit(twin_command("create", thing="org.acme/other", path="/", value={}, correlation_id="t2"))["status"] == 202
    for sql, _ in _calls(engine)[:3]:
        refusal(ingest, sql, {"t1": signal_id(engine, "t1")})
    for sql in TABLE_WRITES[:2]:
        assert refusal(ingest, sql) == "42501"
    assert ledger.acknowledge("app", ack_message("t1", "app:done")) == {"status": 204}
    pipeline.run(spark, PipelineSettings(database_url=as_login(database_url, logins["ackstore_pipeline"]), partitions=2))
    assert ledger.result("t1")["status"] == 200 and ledger.result("t2")["status"] == 201
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM command_responses WHERE status = 500")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM acks WHERE label = 'twin-persisted'")).scalar_one() == 0
