"""The validation gate (A.2.6): Great Expectations over the slice a run decided, on the real
PostgreSQL. A spec-correct ledger passes and is settled; a ledger corrupted on purpose — one
case per invariant — fails exactly that invariant, says so in ``pipeline_runs`` and in the
error, and nothing is settled.

The seeded ledger is built once (real Spark: apply_twin, index_search, sweep) and cloned as a
template database for each case, so every case starts from the same decided slice.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import text

from ackstore.ledger import migrate
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from jobs import gate, pipeline
from jobs.expectations import INVARIANTS
from jobs.settings import PipelineSettings
from tests.conftest import ADMIN_URL
from tests.support.ledger import ack_message, twin_command

pytestmark = pytest.mark.spark

SOURCE = "amqp-orders"
LABEL = "amqp-orders:audit"
WEAK_LABEL = "filtering:seen"
BOTH = ["twin-persisted", LABEL]


def _submit(store: AckStore, message_id: str, thing: str, *, api: str = "connectivity", source: str = SOURCE,
            path: str = "/", value: Any = None, **headers: Any) -> str:
    envelope = twin_command(thing=thing, path=path, value={} if value is None else value,
                            correlation_id=f"c-{message_id}", **headers)
    answer = store.submit(envelope, api=api, source=source, source_message_id=message_id)
    assert answer["status"] == 202, answer
    return answer["correlationId"]


def _seed(store: AckStore) -> None:
    """One request of every shape the invariants speak about."""
    store.declare("audit-service", [LABEL], connection=SOURCE)
    cid = _submit(store, "acks", "org.acme/acks", requested_acks=BOTH)  # decided by its acks, aggregated
    store.acknowledge("audit-service", ack_message(cid, LABEL, 200, value="ok", thing="org.acme/acks"))
    _submit(store, "deadline", "org.acme/deadline", requested_acks=BOTH, timeout="1ms")  # 424 of 408s
    _submit(store, "error", "org.acme/missing", path="/attributes/x", value=1, requested_acks=["twin-persisted"])
    _submit(store, "shortcut", "org.acme/shortcut", requested_acks=["twin-persisted"])  # plain 201
    _submit(store, "undecided", "org.acme/undecided", requested_acks=BOTH)  # waits for its custom ack
    _submit(store, "api", "org.acme/api", api="http", source="api", requested_acks=["twin-persisted"])
    _submit(store, "cli", "org.acme/cli", source="cli", requested_acks=["twin-persisted"])
    _submit(store, "gateway", "org.acme/gateway", api="http", source="gateway", requested_acks=["twin-persisted"])
    # both built-in labels over HTTP for a created thing whose location needs percent-escaping: its
    # entries are stored (Python writes the location), never derived
    _submit(store, "escaped", "org.acme/t%1", api="http", source="api",
            requested_acks=["twin-persisted", "search-persisted"])


def _seed_weak(store: AckStore) -> None:
    """A weak search-persisted: the thing's indexed state does not change (B.11); a weak ack for a
    custom label whose only subscriber filters the signal out (B.8)."""
    _submit(store, "weak", "org.acme/same", path="/attributes/on", value=True,
            requested_acks=["twin-persisted", "search-persisted"])
    store.declare("filtering", [WEAK_LABEL], filter="eq(attributes/none,1)")
    _submit(store, "weak-custom", "org.acme/weak-custom", requested_acks=["twin-persisted", WEAK_LABEL])


@pytest.fixture(scope="module")
def seeded(spark) -> Iterator[str]:
    """A template database: the seed, applied, indexed and swept — but not yet validated."""
    with scratch_database(ADMIN_URL, "seed") as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        store = AckStore(engine, Settings())
        settings = PipelineSettings(database_url=url, partitions=2)
        store.submit(twin_command(thing="org.acme/same", path="/", value={"attributes": {"on": True}}),
                     source_message_id="first")
        pipeline.run(spark, settings)  # the thing exists and is indexed before the weak case (validated)
        _seed(store)
        _seed_weak(store)
        time.sleep(0.05)  # past the 1 ms deadline
        pipeline.run(spark, PipelineSettings(database_url=url, partitions=2),
                     ("apply_twin", "index_search", "weak_acks", "sweep"))
        engine.dispose()
        yield url


@pytest.fixture
def ledger(seeded: str) -> Iterator[str]:
    with scratch_database(ADMIN_URL, "case", template=seeded) as url:
        yield url


def _id(message_id: str) -> str:
    return f"(SELECT id FROM signals WHERE source_message_id = '{message_id}')"  # test constants only


def _invariant(fragment: str) -> str:
    (match,) = [invariant.states for invariant in INVARIANTS if fragment in invariant.states]
    return match


# A stored twin-persisted ack (as ledgers from before the lean model hold: its response is of the
# batch 'migrated', and the ack counted in time) whose event is gone.
LOST_EVENT = [
    "INSERT INTO ledger_batches (step, committed_at) VALUES ('migrated', now())",
    "UPDATE command_responses SET event_id = NULL, revision = NULL, event_action = NULL, "
    f"batch_id = (SELECT max(id) FROM ledger_batches WHERE step = 'migrated') WHERE signal_id = {_id('acks')}",
    "INSERT INTO acks (signal_id, attempt, label, status, headers, issuer, received_at, disposition) "
    f"SELECT {_id('acks')}, 1, 'twin-persisted', 201, '{{}}', 'ackstore', opened_at, 'counted' FROM attempts "
    f"WHERE signal_id = {_id('acks')} AND attempt = 1",
]
# A built-in ack stored as a row for a command applied since the lean ledger (its fact is derived).
FORGED_BUILTIN = [
    "INSERT INTO acks (signal_id, attempt, label, status, headers, issuer, received_at, disposition) "
    f"SELECT {_id('acks')}, 1, 'twin-persisted', 500, '{{}}', 'ackstore', opened_at, 'counted' FROM attempts "
    f"WHERE signal_id = {_id('acks')} AND attempt = 1",
]

CORRUPTIONS = [
    ("decided before its deadline", "decided at or after that deadline",
     [f"UPDATE request_results SET decided_at = (SELECT deadline_at FROM signals WHERE id = signal_id) - interval '1 minute' "
      f"WHERE signal_id = {_id('deadline')}"], "deadline"),
    ("decided by acks with one counted after the deadline", "had every requested label counted in time",
     [f"UPDATE acks SET received_at = received_at + interval '1 hour' WHERE signal_id = {_id('acks')} AND label = '{LABEL}'"],
     "acks"),
    ("decided early by an error that is no error", "decided early by an error",
     [f"UPDATE command_responses SET is_error = false, status = 204 WHERE signal_id = {_id('error')}"], "error"),
    ("an aggregated body misses a requested label", "exactly one entry per requested label",
     [f"UPDATE request_results SET body = body - '{LABEL}' WHERE signal_id = {_id('acks')}"], "acks"),
    ("an aggregated body has an unrequested label", "no entry for a label that was not requested",
     [f"UPDATE request_results SET body = body || '{{\"x:other\": {{\"status\": 200}}}}' WHERE signal_id = {_id('acks')}"],
     "acks"),
    ("entries derived where read for a request that did not ask for both built-in labels",
     "asked for both built-in labels and has their facts",
     ["UPDATE request_results SET cause = 'acks', body = derived_builtin_body(), "
      "ack_statuses = '{\"twin-persisted\": 201, \"search-persisted\": 204}' "
      f"WHERE signal_id = {_id('shortcut')}"], "shortcut"),
    ("entries derived where read for a created thing whose location needs escaping",
     "asked for both built-in labels and has their facts",
     [f"UPDATE request_results SET body = derived_builtin_body() WHERE signal_id = {_id('escaped')}"], "escaped"),
    ("a plain response derived where read for a request over two labels",
     "asked for twin-persisted alone and has its command's response",
     ["UPDATE request_results SET cause = 'response', status = 200, body = NULL, headers = NULL, ack_statuses = '{}' "
      f"WHERE signal_id = {_id('acks')}"], "acks"),
    ("a plain response derived where read with another status than its command's response",
     "asked for twin-persisted alone and has its command's response",
     [f"UPDATE request_results SET status = 200 WHERE signal_id = {_id('shortcut')}"], "shortcut"),
    ("a plain response derived where read over a body stored in its row",
     "asked for twin-persisted alone and has its command's response",
     [f"UPDATE request_results SET body = '\"hidden\"' WHERE signal_id = {_id('shortcut')}"], "shortcut"),
    ("an aggregated status that does not follow from its entries", "status follows from its entries",
     [f"UPDATE request_results SET status = 424 WHERE signal_id = {_id('acks')}"], "acks"),
    ("two counted acks for one label", "at most one counted ack",
     ["DROP INDEX uq_acks_counted_signal_attempt_label",
      "INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, disposition) "
      f"SELECT signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, disposition FROM acks "
      f"WHERE signal_id = {_id('acks')} AND label = '{LABEL}'"], "acks"),
    ("a counted ack for a label never requested", "label was requested",
     ["INSERT INTO acks (signal_id, attempt, label, status, headers, issuer, disposition) "
      f"VALUES ({_id('acks')}, 1, 'amqp-orders:other', 200, '{{}}', 'audit-service', 'counted')"], "acks"),
    ("a weak ack for a label never requested", "a weak ack's included",
     ["INSERT INTO declared_labels (label, holder) VALUES ('amqp-orders:audit-2', 'connection:amqp-orders')",
      "INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, weak, disposition) "
      f"VALUES ({_id('acks')}, 1, 'amqp-orders:audit-2', 200, '\"filtered\"', "
      "'{\"ditto-weak-ack\": true}', 'ackstore', true, 'counted')"], "acks"),
    ("a weak ack for a label nobody declared", "label some subscriber declared",
     [f"DELETE FROM declared_labels WHERE label = '{LABEL}'",
      "UPDATE acks SET weak = true, status = 200, headers = headers || '{\"ditto-weak-ack\": true}' "
      f"WHERE signal_id = {_id('acks')} AND label = '{LABEL}'"], "acks"),
    ("twin-persisted for a command whose response failed", "response is a success",
     [f"UPDATE command_responses SET status = 500 WHERE signal_id = {_id('acks')}"], "acks"),
    ("twin-persisted without its event", "revision is in the event log", LOST_EVENT, "acks"),
    ("a built-in ack stored as a row since the lean ledger", "kept from before the lean ledger", FORGED_BUILTIN,
     "acks"),
    ("a weak ack that is not a 200", "weak ack is a 200",
     ["UPDATE acks SET status = 204 WHERE weak"], "weak-custom"),
    ("a weak ack without its header", "carries the header ditto-weak-ack",
     ["UPDATE acks SET headers = headers - 'ditto-weak-ack' WHERE weak"], "weak-custom"),
    ("a settlement for an undecided request", "belongs to a decided request",
     [f"INSERT INTO settlements (signal_id, attempt, decision) VALUES ({_id('undecided')}, 1, 'ack')"], "undecided"),
    ("a settlement for a CLI signal", "API or CLI source",
     [f"INSERT INTO settlements (signal_id, attempt, decision) VALUES ({_id('cli')}, 1, 'ack')"], "cli"),
    ("a settlement for a signal that did not come through a connection", "came through a connection",
     [f"INSERT INTO settlements (signal_id, attempt, decision) VALUES ({_id('gateway')}, 1, 'ack')"], "gateway"),
    # No foreign key guards the hot tables (a merge's joins do): a broken merge or a hand edit
    # leaves orphans, which the gate finds in its slice.
    ("a decided request whose signal is gone", "decided request of the slice belongs to a stored signal",
     [f"DELETE FROM signals WHERE id = {_id('shortcut')}"], "shortcut"),
    ("a redelivery's decided request whose attempt is gone", "belongs to a stored signal and attempt",
     [f"UPDATE request_results SET attempt = 2 WHERE signal_id = {_id('shortcut')}"], "shortcut"),
    ("a settlement whose signal is gone", "settlement decision of the slice belongs to a stored signal",
     [f"INSERT INTO settlements (signal_id, attempt, decision) VALUES ({_id('first')}, 1, 'ack')",
      f"DELETE FROM signals WHERE id = {_id('first')}"], "first"),
]


def test_every_invariant_has_a_corruption_case() -> None:
    covered = {_invariant(fragment) for _, fragment, _, _ in CORRUPTIONS}
    assert covered == {invariant.states for invariant in INVARIANTS}


def _count(url: str, sql: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql)).scalar_one()
    finally:
        engine.dispose()


def test_a_spec_correct_slice_passes_and_is_settled(ledger: str) -> None:
    stats = pipeline.run(None, PipelineSettings(database_url=ledger, partitions=2), ("validate",))
    assert stats["validate"]["decisions"] == 10 and "failures" not in stats["validate"]
    # The connection's decided requests (not API, CLI or gateway ones) wait for settle.
    assert _count(ledger, "SELECT count(*) FROM queue_settle") == 6
    assert _count(ledger, "SELECT count(*) FROM awaiting_validation()") == 0


def test_a_slice_read_without_rows_of_attempt_1_passes_and_is_settled(ledger: str) -> None:
    """Attempt 1 is its signal (decisions #146): the gate reads no row of it, so a slice whose
    attempt-1 rows are gone — as a ledger written without them will hold — passes as it is."""
    engine = make_engine(ledger)
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # a superuser, the guards' triggers off
        gone = conn.execute(text("DELETE FROM attempts WHERE attempt = 1 AND signal_id IN "
                                 "(SELECT signal_id FROM awaiting_validation())")).rowcount
    engine.dispose()
    assert gone == 10
    stats = pipeline.run(None, PipelineSettings(database_url=ledger, partitions=2), ("validate",))
    assert stats["validate"]["decisions"] == 10 and "failures" not in stats["validate"]
    assert _count(ledger, "SELECT count(*) FROM queue_settle") == 6


@pytest.mark.parametrize(("case", "fragment", "statements", "culprit"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupted_ledger_stops_the_run_before_settle(
    ledger: str, case: str, fragment: str, statements: list[str], culprit: str
) -> None:
    engine = make_engine(ledger)
    with engine.begin() as conn:
        culprit_id = conn.execute(text(f"SELECT {_id(culprit)}")).scalar_one()
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # a superuser, the guards' triggers off
        for statement in statements:
            conn.execute(text(statement))
    engine.dispose()
    settlements_before = _count(ledger, "SELECT count(*) FROM settlements")

    with pytest.raises(pipeline.ValidationFailed) as failed:
        pipeline.run(None, PipelineSettings(database_url=ledger, partitions=2, run_id="r1"), ("validate", "settle"))

    assert [failure.states for failure in failed.value.failures] == [_invariant(fragment)]
    assert culprit_id in [sample.get("signal_id") for sample in failed.value.failures[0].samples]
    assert _invariant(fragment) in str(failed.value) and f"signal_id {culprit_id}" in str(failed.value)
    assert failed.value.completed == {}  # settle never ran
    # Recorded in pipeline_runs, and nothing was settled or queued for settling.
    recorded = _count(ledger, "SELECT stats->'failures'->0->>'invariant' FROM pipeline_runs "
                              "WHERE run_id = 'r1' AND step = 'validate'")
    assert recorded == _invariant(fragment)
    assert _count(ledger, "SELECT count(*) FROM settlements") == settlements_before
    assert _count(ledger, "SELECT count(*) FROM queue_settle") == 0
    assert _count(ledger, "SELECT count(*) FROM awaiting_validation()") == 10  # the slice waits for a repair


def test_after_a_repair_the_next_run_passes_and_settles(ledger: str) -> None:
    engine = make_engine(ledger)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE request_results SET status = 424 WHERE signal_id = {_id('acks')}"))
    with pytest.raises(pipeline.ValidationFailed):
        pipeline.run(None, PipelineSettings(database_url=ledger), ("validate",))
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE request_results SET status = 200 WHERE signal_id = {_id('acks')}"))
    engine.dispose()
    stats = pipeline.run(None, PipelineSettings(database_url=ledger), ("validate",))
    assert stats["validate"]["to_settle"] == 6


def test_the_cli_exits_non_zero_and_prints_the_failures(ledger: str) -> None:
    engine = make_engine(ledger)
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # a superuser, the guards' triggers off
        for statement in LOST_EVENT:
            conn.execute(text(statement))
    engine.dispose()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ackstore"), "--database-url", ledger, "pipeline", "run",
         "--step", "validate", "--step", "settle"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["validation"]["passed"] is False
    assert answer["validation"]["failures"][0]["invariant"] == _invariant("revision is in the event log")
    assert "settle" not in answer["steps"]
    assert "nothing settled" in done.stderr and _invariant("revision is in the event log") in done.stderr


def _connections(url: str) -> int:
    """Other sessions on the ledger's database than the one asking."""
    return _count(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()")


def test_the_gate_is_set_up_once_per_process_and_checks_each_new_slice(ledger: str, spark) -> None:
    """The second pass of a process reuses the first's GX set-up, yet checks its own slice: a
    corruption in the new slice alone is found. No connection is held between passes."""
    settings = PipelineSettings(database_url=ledger, partitions=2)
    assert "failures" not in pipeline.run(None, settings, ("validate",))["validate"]
    kept = gate.gate_for(ledger)
    assert _connections(ledger) == 0

    engine = make_engine(ledger)
    store = AckStore(engine, Settings())
    cid = _submit(store, "later", "org.acme/later", requested_acks=BOTH)
    store.acknowledge("audit-service", ack_message(cid, LABEL, 200, value="ok", thing="org.acme/later"))
    pipeline.run(spark, settings, ("apply_twin", "index_search", "weak_acks", "sweep"))
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE request_results SET status = 424 WHERE signal_id = {_id('later')}"))
        later = conn.execute(text(f"SELECT {_id('later')}")).scalar_one()
    engine.dispose()

    with pytest.raises(pipeline.ValidationFailed) as failed:
        pipeline.run(None, replace(settings, run_id="r2"), ("validate",))
    assert [failure.states for failure in failed.value.failures] == [_invariant("status follows from its entries")]
    assert [sample["signal_id"] for sample in failed.value.failures[0].samples] == [later]
    assert gate.gate_for(ledger) is kept
    assert _connections(ledger) == 0


def test_a_gate_that_cannot_be_built_is_not_kept_and_says_why_each_time() -> None:
    """A ledger the gate cannot reach: the step meets the error, and the next slice tries again
    (no broken gate is kept for the process)."""
    unreachable = "postgresql://127.0.0.1:1/nowhere?connect_timeout=2"
    for _ in range(2):
        with pytest.raises(Exception, match="127.0.0.1|Connection refused|connect"):
            gate.check(unreachable, {"requests": "SELECT 1", "settlements": None})
