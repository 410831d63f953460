"""Settlement decisions end to end (B.9, A.2.6, A.2.10): real PostgreSQL, real Spark, the whole
pipeline — apply_twin → index_search → sweep → validate → settle.

Each row of B.9's decision table is produced by real signals from a connection; redelivery
opens attempts, the twin change is never applied twice, and attempts end in dead-letter.
"""

from __future__ import annotations

import json
import select as select_module
import time
from typing import Any

import psycopg2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from tests.support.ledger import ack_message, snapshot, twin_command

pytestmark = pytest.mark.spark

SOURCE = "amqp-orders"
T1 = "org.acme/t1"  # the thing of the single-signal tests
LABEL = "amqp-orders:audit"


@pytest.fixture
def auditor(store: AckStore) -> AckStore:
    assert store.declare("audit-service", [LABEL], connection=SOURCE) == {"status": 204}
    return store


def from_connection(store: AckStore, message_id: str, *, thing: str, path: str = "/attributes/on",
                    value: Any = True, action: str = "modify", **headers: Any) -> str:
    """Submit a message of the connection; its correlation id."""
    envelope = twin_command(action, thing=thing, path=path, value=value, correlation_id=f"c-{message_id}", **headers)
    answer = store.submit(envelope, api="connectivity", source=SOURCE, source_message_id=message_id)
    assert answer["status"] == 202, answer
    return answer["correlationId"]


def rows(store: AckStore, sql: str, **params: Any) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(text(sql), params))


def decisions(store: AckStore) -> dict[str, list[tuple[int, str]]]:
    """(attempt, decision) per source message id."""
    found: dict[str, list[tuple[int, str]]] = {}
    for row in rows(store, "SELECT s.source_message_id AS m, st.attempt, st.decision FROM settlements st "
                           "JOIN signals s ON s.id = st.signal_id ORDER BY st.attempt"):
        found.setdefault(row.m, []).append((row.attempt, row.decision))
    return found


def test_every_row_of_the_decision_table_from_real_signals(auditor: AckStore, run_pipeline) -> None:
    store = auditor
    # Things that already exist (and are indexed) before the connection's messages arrive.
    for thing in ("org.acme/existing", "org.acme/same"):
        store.submit(twin_command(thing=thing, path="/", value={"attributes": {"on": True}}))
    run_pipeline()

    tp, both = ["twin-persisted"], ["twin-persisted", LABEL]
    from_connection(store, "persisted", thing="org.acme/t1", path="/", value={}, requested_acks=tp)
    from_connection(store, "412", thing="org.acme/existing", path="/", value={}, if_match='"rev:9"', requested_acks=tp)
    from_connection(store, "404", thing="org.acme/missing", requested_acks=tp)
    acked = {
        "custom-200": 200, "custom-400": 400, "custom-503": 503, "custom-424": 424,
    }
    for message_id, status in acked.items():
        cid = from_connection(store, message_id, thing=f"org.acme/{message_id}", path="/", value={}, requested_acks=both)
        assert store.acknowledge("audit-service", ack_message(cid, LABEL, status, thing=f"org.acme/{message_id}")) == {"status": 204}
    from_connection(store, "timed-out", thing="org.acme/t2", path="/", value={}, requested_acks=both, timeout="1ms")
    from_connection(store, "weak-search", thing="org.acme/same", value=True,
                    requested_acks=["twin-persisted", "search-persisted"])
    cid = from_connection(store, "no-response", thing="org.acme/t3", path="/", value={}, requested_acks=both,
                          response_required=False)
    store.acknowledge("audit-service", ack_message(cid, LABEL, 200, thing="org.acme/t3"))
    from_connection(store, "plain-response", thing="org.acme/t4", path="/", value={}, requested_acks=[])
    from_connection(store, "fire-and-forget", thing="org.acme/t5", path="/", value={}, requested_acks=[],
                    response_required=False)
    time.sleep(0.05)  # the 1 ms deadline has passed

    stats = run_pipeline()

    assert decisions(store) == {
        "persisted": [(1, "ack")],  # all arrived, none failed
        "412": [(1, "ack")],  # precondition failed counts as success
        "404": [(1, "reject")],  # another 4xx error: no redelivery
        "custom-200": [(1, "ack")],
        "custom-400": [(1, "reject")],  # a failed member, only other 4xx
        "custom-503": [(1, "redeliver")],  # a 5xx member
        "custom-424": [(1, "redeliver")],  # a 424 member
        "timed-out": [(1, "redeliver")],  # 408 placeholders
        "weak-search": [(1, "ack")],  # the weak search-persisted 200 succeeds
        "no-response": [(1, "ack")],  # 202 after the acks
        "plain-response": [(1, "ack")],  # the plain response, settled
        "fire-and-forget": [(1, "ack")],  # QoS 0
    }
    weak = rows(store, "SELECT a.status, a.weak FROM request_acks a JOIN signals s ON s.id = a.signal_id "
                       "WHERE s.source_message_id = 'weak-search' AND a.label = 'search-persisted'")
    assert [(r.status, r.weak) for r in weak] == [(200, True)]
    assert stats["settle"]["by_decision"] == {"ack": 7, "redeliver": 3, "reject": 2}
    assert stats["validate"]["to_settle"] == 12
    # API signals are answered by their stored result, never settled on a transport.
    assert rows(store, "SELECT count(*) AS n FROM settlements st JOIN signals s ON s.id = st.signal_id "
                       "WHERE s.source <> :source", source=SOURCE)[0].n == 0


def test_a_rerun_of_the_same_run_settles_nothing_twice(auditor: AckStore, run_pipeline) -> None:
    cid = from_connection(auditor, "m1", thing="org.acme/t1", path="/", value={}, requested_acks=["twin-persisted", LABEL])
    auditor.acknowledge("audit-service", ack_message(cid, LABEL, 200, thing=T1))
    run_pipeline(run_id="run-1")
    # The re-run's validate checks the settlement decisions the first run wrote (they came
    # after its gate): only that watermark may move.
    unchanged = ("pipeline_runs", "pipeline_watermarks")
    after_first = snapshot(auditor.engine, without=unchanged)
    run_pipeline(run_id="run-1")
    assert snapshot(auditor.engine, without=unchanged) == after_first
    assert decisions(auditor) == {"m1": [(1, "ack")]}


def test_settle_notifies_the_source_that_has_decisions(auditor: AckStore, run_pipeline, database_url: str) -> None:
    cid = from_connection(auditor, "m1", thing="org.acme/t1", path="/", value={}, requested_acks=["twin-persisted"])
    listener = psycopg2.connect(database_url.replace("postgresql+psycopg2://", "postgresql://"))
    try:
        listener.autocommit = True
        listener.cursor().execute("LISTEN ackstore_settlements")
        run_pipeline()
        payloads: list[str] = []
        deadline = time.monotonic() + 10
        while not payloads and time.monotonic() < deadline:
            select_module.select([listener], [], [], 0.5)
            listener.poll()
            payloads += [note.payload for note in listener.notifies]
        assert payloads == [SOURCE]
    finally:
        listener.close()
    assert cid and decisions(auditor) == {"m1": [(1, "ack")]}


def test_a_retransmission_before_the_decision_or_after_an_ack_is_plain(auditor: AckStore, run_pipeline) -> None:
    cid = from_connection(auditor, "m1", thing="org.acme/t1", path="/", value={}, requested_acks=["twin-persisted"])
    before = snapshot(auditor.engine)
    assert from_connection(auditor, "m1", thing="org.acme/t1", path="/", value={}) == cid
    assert snapshot(auditor.engine) == before  # nothing stored, no attempt
    run_pipeline()
    assert decisions(auditor) == {"m1": [(1, "ack")]}
    assert from_connection(auditor, "m1", thing="org.acme/t1", path="/", value={}) == cid
    assert rows(auditor, "SELECT count(*) AS n FROM attempts WHERE attempt > 1")[0].n == 0  # no second attempt
    assert auditor.stored_signal(cid)["state"] == "settling"  # decided, not carried out


def test_a_redelivered_message_opens_the_next_attempt_without_applying_twice(auditor: AckStore, run_pipeline) -> None:
    store = auditor
    cid = from_connection(store, "m1", thing="org.acme/t1", path="/", value={"attributes": {"n": 1}},
                          requested_acks=["twin-persisted", LABEL])
    store.acknowledge("audit-service", ack_message(cid, LABEL, 503, thing=T1))
    run_pipeline()
    assert decisions(store) == {"m1": [(1, "redeliver")]}

    # The broker redelivers: the same message id opens attempt 2 for the label that failed.
    assert from_connection(store, "m1", thing="org.acme/t1", path="/", value={"attributes": {"n": 1}}) == cid
    attempts = store.stored_signal(cid)["attempts"]
    assert [(a["attempt"], a["requestedAcks"]) for a in attempts] == [(1, ["twin-persisted", LABEL]), (2, [LABEL])]
    assert store.result(cid) is None  # the latest attempt is undecided
    assert store.acknowledge("audit-service", ack_message(cid, LABEL, 200, value="done", thing=T1)) == {"status": 204}
    run_pipeline()

    assert decisions(store) == {"m1": [(1, "redeliver"), (2, "ack")]}
    # attempt 2 asks one label: its aggregated answer has the command's headers (B.5)
    assert store.result(cid) == {"status": 200, "body": "done", "headers": {
        "correlation-id": cid, "timeout": "300000ms", "response-required": False}}
    # Applied once: one revision, one event, one twin-persisted ack.
    assert rows(store, "SELECT revision FROM things WHERE thing_id = 'org.acme:t1'")[0].revision == 1
    assert rows(store, "SELECT count(*) AS n FROM thing_events")[0].n == 1
    assert rows(store, "SELECT count(*) AS n FROM request_acks WHERE label = 'twin-persisted'")[0].n == 1
    ack_rows = rows(store, "SELECT attempt, label, status, disposition FROM request_acks WHERE label = :l ORDER BY id", l=LABEL)
    assert [tuple(r) for r in ack_rows] == [(1, LABEL, 503, "counted"), (2, LABEL, 200, "counted")]


def test_a_persisted_change_counts_for_the_next_attempt(auditor: AckStore, run_pipeline) -> None:
    """The deadline passed before the change was applied: attempt 1 is 408 command.timeout and
    redelivered; the change, applied since, is not applied again and its twin-persisted ack
    counts for attempt 2 at once (A.2.10)."""
    store = auditor
    cid = from_connection(store, "m1", thing="org.acme/t1", path="/", value={}, requested_acks=["twin-persisted"],
                          timeout="1ms")
    time.sleep(0.05)
    run_pipeline("sweep", "validate", "settle")
    assert store.stored_signal(cid)["attempts"][0]["result"]["status"] == 408
    assert decisions(store) == {"m1": [(1, "redeliver")]}
    run_pipeline("apply_twin")  # the change lands after the decision: its ack is late for attempt 1
    assert from_connection(store, "m1", thing="org.acme/t1", path="/", value={}) == cid
    run_pipeline()

    assert decisions(store) == {"m1": [(1, "redeliver"), (2, "ack")]}
    assert store.result(cid)["status"] == 201  # the plain response of the built-in-only shortcut
    tp = rows(store, "SELECT attempt, disposition FROM request_acks WHERE label = 'twin-persisted' ORDER BY attempt")
    assert [tuple(r) for r in tp] == [(1, "late"), (2, "counted")]
    assert rows(store, "SELECT revision FROM things")[0].revision == 1


def test_attempts_end_in_dead_letter(auditor: AckStore, run_pipeline) -> None:
    store = auditor
    limited = {"rules": Settings(max_attempts=2)}
    cid = from_connection(store, "m1", thing="org.acme/t1", path="/", value={}, requested_acks=["twin-persisted", LABEL])
    store.acknowledge("audit-service", ack_message(cid, LABEL, 500, thing=T1))
    run_pipeline(**limited)
    from_connection(store, "m1", thing="org.acme/t1", path="/", value={})
    store.acknowledge("audit-service", ack_message(cid, LABEL, 500, thing=T1))
    run_pipeline(**limited)
    assert decisions(store) == {"m1": [(1, "redeliver"), (2, "dead-letter")]}

    # After a dead-letter decision a redelivery is a plain retransmission: no third attempt.
    before = snapshot(store.engine)
    assert from_connection(store, "m1", thing="org.acme/t1", path="/", value={}) == cid
    assert snapshot(store.engine) == before
    assert [a["settlement"]["decision"] for a in store.stored_signal(cid)["attempts"]] == ["redeliver", "dead-letter"]


# --- SQL's common case against the B.9 rule ----------------------------------------------------

_result_spec = st.fixed_dictionaries({
    "api": st.sampled_from(["connectivity", "connectivity", "http"]),
    "source": st.sampled_from([SOURCE, SOURCE, "api", "cli"]),
    "channel": st.sampled_from(["twin", "twin", "live"]),
    "cause": st.sampled_from(["acks", "acks", "response", "accepted", "deadline", "error"]),
    "status": st.sampled_from([200, 201, 202, 204, 204, 400, 404, 408, 412, 424, 503]),
    "ack_statuses": st.dictionaries(st.sampled_from(["twin-persisted", "search-persisted", "live-response", LABEL]),
                                    st.sampled_from([200, 201, 204, 204, 400, 408, 424, 503]), max_size=3),
    "attempt": st.sampled_from([1, 1, 1, 5]),
})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(_result_spec, min_size=1, max_size=8))
def test_sql_acks_exactly_the_successes_and_as_python_would(engine, specs: list[dict[str, Any]]) -> None:
    """settle_common (jobs/sql/settle.sql) writes 'ack' for exactly the queued results whose status
    and every entry are 2xx, from a connection, and Python's B.9 decision for each is 'ack' too."""
    from tests.support.ledger import empty
    from jobs import settle
    from jobs.sql import statements

    with engine.begin() as conn:
        empty(conn)
        for n, spec in enumerate(specs, start=1):
            conn.execute(text(
                "INSERT INTO signals (id, source, source_message_id, correlation_id, api, channel, kind, action, "
                "thing_id, topic, path, headers, requested_acks, response_required, timeout_ms, deadline_at) "
                "VALUES (:n, :source, :n, :n, :api, :channel, :kind, 'modify', 'org.acme:t', 'x', '/', '{}', '{}', "
                "true, 10000, now())"),
                {"n": n, "source": spec["source"], "api": spec["api"], "channel": spec["channel"],
                 "kind": "live-message" if spec["channel"] == "live" else "twin-command"})
            for attempt in range(2, spec["attempt"] + 1):
                conn.execute(text("INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at) "
                                  "VALUES (:n, :a, '{}', now(), now())"), {"n": n, "a": attempt})
            conn.execute(text(
                "INSERT INTO request_results (signal_id, attempt, status, headers, cause, ack_statuses, batch_id) "
                "VALUES (:n, :a, :status, '{}', :cause, CAST(:statuses AS jsonb), 0)"),
                {"n": n, "a": spec["attempt"], "status": spec["status"], "cause": spec["cause"],
                 "statuses": json.dumps(spec["ack_statuses"])})
            conn.execute(text("INSERT INTO queue_settle (signal_id, attempt) VALUES (:n, :a)"),
                         {"n": n, "a": spec["attempt"]})
    with engine.connect() as conn:
        python = {row["signal_id"]: settle.decide_row(dict(row), max_attempts=5)
                  for row in conn.execute(text(statements("settle")["pending"])).mappings()}
        conn.execute(text(statements("settle")["settle_common"]), {"ack": "ack", "channel": "test"})
        sql = dict(conn.execute(text("SELECT signal_id, decision FROM settlements")).all())
        left = {row.signal_id for row in conn.execute(text("SELECT signal_id FROM queue_settle"))}
        conn.rollback()
    succeeded = {n for n, spec in enumerate(specs, start=1)
                 if spec["api"] == "connectivity" and spec["source"] not in ("api", "cli")
                 and 200 <= spec["status"] < 300 and all(200 <= s < 300 for s in spec["ack_statuses"].values())}
    assert set(sql) == succeeded and left == set(python) - succeeded
    assert all(decision == "ack" == python[n] for n, decision in sql.items()), (sql, python)
