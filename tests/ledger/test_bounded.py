"""Bounded work (architecture.md, "Growth"): on a ledger with history, every statement a run
uses to find or slice its work can walk an index or a queue — never needs a scan of a history
table. (pgqueuer's idea: EXPLAIN the hot queries on seeded tables and look at the plan.)

Plans are taken with ``enable_seqscan = off``: then PostgreSQL scans a table sequentially only
where no index can serve, so the check does not depend on how big this test's tables are (at
this size a sequential scan is often the cheaper choice; at a million it is not —
``benchmarks/history.py`` measures that).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import text

from ackstore.ledger import archive_lookups
from ackstore.ledger import migrate, objects
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.named_sql import LEDGER_SQL, load
from ackstore.ledger.reports import Window
from ackstore.ledger.schema import SEALED_TABLES
from ackstore.rules import settlement
from ackstore.rules.settings import METRIC_SOURCES
from benchmarks import history
from jobs import expectations, sweep, validate
from jobs.sql import statement, statements
from tests.conftest import ADMIN_URL

# The tables that grow with the history: every fact table, and the twins, the search index and the hand-outs.
HISTORY_TABLES = {*(table.name for table in SEALED_TABLES), "thing_events", "things", "search_things", "search_index",
                  "deliveries"}
READS = [
    ("apply_twin", "pending"), ("apply_twin", "pending_count"),
    ("index_search", "changed"), ("index_search", "pending_count"),
    ("weak_acks", "candidates"), ("weak_acks", "candidate_bounds"),
    ("sweep", "decide_builtin"), ("sweep", "decide_common"), ("sweep", "undecided"), ("sweep", "undecided_bounds"),
    ("validate", "watermarks"), ("validate", "slice"), ("validate", "enqueue_settlements"),
    ("settle", "settle_common"), ("settle", "pending_count"), ("settle", "pending"), ("settle", "pending_bounds"),
]
PARAMS = {
    "run_id": "r", "batch_id": 1, "partition": 0, "partitions": 4, "transport_api": settlement.TRANSPORT_API,
    "local_sources": list(settlement.LOCAL_SOURCES), **sweep.COMMON_PARAMS,
    "ack": settlement.Settlement.ACK.value, "channel": "ackstore_settlements",
}
# What a pull reads (ackstore/ledger/sql/handouts.sql): its cost follows what it hands out.
# (decided_ready, ready, close and lock_handout call write functions: their statements are run.)
PULL_READS = ["decided_ready", "ready", "close", "events_after", "requested_now", "messages", "lock_handout"]
PULL_PARAMS = {"subscriber": "app", "now": datetime(2026, 11, 22, 12, tzinfo=timezone.utc), "lease_ms": 30_000, "limit": 100, "position": 0,
               "scan": 500, "signal_ids": [1, 2, 3], "signal_id": 1}


@pytest.fixture(scope="module")
def ledger() -> Iterator[Any]:
    """200 000 decided requests of history, and a little pending work in every queue."""
    with scratch_database(ADMIN_URL, "bounded") as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        history.seed(url, 200_000)
        history.add_commands(url, 200, "fresh")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO queue_index SELECT thing_id, revision FROM things LIMIT 200"))
            # The last 200 results, decided in a sweep batch of their own, wait for the validation gate.
            conn.execute(text("WITH b AS (INSERT INTO ledger_batches (step, committed_at) VALUES ('sweep', now()) "
                              "RETURNING id) UPDATE request_results SET batch_id = (SELECT id FROM b) "
                              "WHERE signal_id > (SELECT max(signal_id) - 200 FROM request_results)"))
            conn.execute(text("INSERT INTO queue_settle SELECT r.signal_id, r.attempt FROM request_results r "
                              "JOIN signals s ON s.id = r.signal_id WHERE s.api = 'connectivity' "
                              "ORDER BY r.signal_id DESC LIMIT 100"))
            conn.execute(text("INSERT INTO attempts (signal_id, attempt, requested_acks, deadline_at) "
                              "SELECT id, 2, requested_acks, now() FROM signals WHERE id % 10 = 0"))
            # A subscriber that was handed every signal and answered all but a few.
            conn.execute(text("INSERT INTO subscribers (id, holder, channels) VALUES ('app', 'subscriber:app', "
                              "ARRAY['twin', 'live'])"))
            conn.execute(text("INSERT INTO deliveries (subscriber_id, signal_id, token_key, handouts, available_at, "
                              "done_at) SELECT 'app', id, 'key', 1, now(), "
                              "CASE WHEN id % 1000 <> 0 THEN now() END FROM signals"))
            # A tenth of the requests decided before their built-in facts came (the apply step behind):
            # the seal keeps them awaited, and neither a scrape nor a seal may read them all.
            conn.execute(text("INSERT INTO metric_awaited_facts (signal_id, attempt, thing_id) "
                              "SELECT id, 1, thing_id FROM signals WHERE id % 10 = 0"))
            # Its connection, claimed before migration 0020 by nobody in particular (any login records it).
            conn.execute(text("INSERT INTO connections (id) VALUES (:c)"), {"c": history.SOURCE})
            # ... and the last 50 settlement decisions.
            conn.execute(text("UPDATE pipeline_watermarks SET position = position - 50 "
                              "WHERE name = 'validated_settlements'"))
            after = conn.execute(statement("validate", "watermarks")).one()._asdict()
            bounds = {**after, **conn.execute(statement("validate", "slice"), after).one()._asdict()}
            bounds["connection_signals"] = list(conn.execute(text(
                "SELECT id FROM signals WHERE source = :c ORDER BY id LIMIT 3"), {"c": history.SOURCE}).scalars())
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE"))
        yield engine, bounds
        engine.dispose()


def _plan(engine: Any, sql: str, params: dict[str, Any] | None = None, settings: str | None = None) -> dict[str, Any]:
    with engine.connect() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        if settings:
            conn.execute(text(settings))
        plan = conn.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"), params or {}).scalar_one()
        conn.rollback()
    return (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]


def _plans_run(engine: Any, sql: str, params: dict[str, Any] | None = None, settings: str | None = None,
               analyze: bool = False, prepare: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """The plan of ``sql`` and of every statement the functions it calls run (the write functions,
    decisions #94: a plain EXPLAIN shows only the call), as run once — auto_explain sends each plan
    back as a notice — and rolled back. One root whose children are those plans. ``analyze``:
    with each node's actual rows, and the planner free to scan sequentially (the plan it picks).
    ``prepare``: rows to write first, in the same transaction."""
    with engine.connect() as conn:
        if prepare:
            prepare(conn)
        conn.execute(text("DISCARD PLANS"))  # a function's statements are planned again, with the settings below
        conn.execute(text("LOAD 'auto_explain'"))
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                        "auto_explain.log_format = json", "auto_explain.log_level = notice",
                        "auto_explain.log_analyze = on" if analyze else "enable_seqscan = off"):
            conn.execute(text(f"SET LOCAL {setting}"))
        if settings:
            conn.execute(text(settings))
        raw = conn.connection.dbapi_connection
        del raw.notices[:]
        with raw.cursor() as cursor:  # psycopg2's own: notices of a statement SQLAlchemy runs do not reach the list
            cursor.execute(str(text(sql).compile(dialect=conn.dialect)), params or {})
        logged = [json.loads(notice[notice.index("{"):]) for notice in raw.notices if "plan:" in notice]
        conn.rollback()
    return {"Node Type": "Run", "Plans": [entry["Plan"] for entry in logged]}


# Partial indexes that hold only pending rows: reading one whole is bounded work.
PENDING_INDEXES = {"ix_settlements_not_carried_out", "ix_deliveries_pending"}


def _scans(plan: dict[str, Any], first_rows: bool = False) -> Iterator[str]:
    """Tables read whole: by a sequential scan, or by an index scan with no condition (unless
    the index holds only pending rows, or it is read in order under a LIMIT with nothing to
    filter: ``max(id)``'s first row of an index) — a plain one, or a bitmap's under its heap scan."""
    node = plan.get("Node Type", "")
    whole_index = (node in ("Index Scan", "Index Only Scan") and _whole(plan)
                   and not (first_rows and "Filter" not in plan)
                   or node == "Bitmap Heap Scan" and any(_whole(index) for index in _bitmap_indexes(plan)))
    if node == "Seq Scan" or whole_index:
        yield plan["Relation Name"]
    for child in plan.get("Plans", []):
        yield from _scans(child, node == "Limit")


def _rows_read(plan: dict[str, Any], table: str) -> int:
    """How many rows the scans of ``table`` in an analysed plan returned, over all their loops."""
    own = plan.get("Actual Rows", 0) * plan.get("Actual Loops", 1) if plan.get("Relation Name") == table else 0
    return own + sum(_rows_read(child, table) for child in plan.get("Plans", []))


def _whole(scan: dict[str, Any]) -> bool:
    return "Index Cond" not in scan and scan.get("Index Name") not in PENDING_INDEXES


def _bitmap_indexes(heap_scan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The index scans a bitmap heap scan reads (through BitmapOr and BitmapAnd), not its sub-plans'."""
    for child in heap_scan.get("Plans", []):
        if child.get("Node Type") == "Bitmap Index Scan":
            yield child
        elif child.get("Node Type") in ("BitmapOr", "BitmapAnd"):
            yield from _bitmap_indexes(child)


def test_the_check_catches_a_limit_over_a_filtered_index_scan(ledger) -> None:
    """A LIMIT reads an index's first rows only when nothing filters them: a filter can read it all."""
    engine, _ = ledger
    assert "command_responses" not in set(_scans(_plan(engine, "SELECT max(event_id) FROM command_responses")))
    filtered = "SELECT event_id FROM command_responses WHERE status = 599 ORDER BY event_id DESC LIMIT 1"
    assert "command_responses" in set(_scans(_plan(engine, filtered)))


def test_the_check_catches_an_anti_join_over_history(ledger) -> None:
    """What the sweep read before the queues: it must be flagged."""
    engine, _ = ledger
    old_read = ("SELECT s.id FROM signals s "
                "WHERE NOT EXISTS (SELECT 1 FROM request_results x WHERE x.signal_id = s.id)")
    assert "signals" in set(_scans(_plan(engine, old_read)))


def test_the_check_catches_every_awaited_attempt_read(ledger) -> None:
    """What the scrape and the seal read before issue 50's review: every awaited attempt, a
    bitmap scan of its whole key (seconds beside 200 000) — it must be flagged."""
    engine, _ = ledger
    old_read = ("SELECT w.signal_id FROM metric_awaited_facts w UNION "
                "SELECT r.signal_id FROM request_results r WHERE r.seq > 1000")
    assert "metric_awaited_facts" in set(_scans(_plan(engine, old_read)))


@pytest.mark.parametrize(("job", "name"), READS, ids=[f"{job}.{name}" for job, name in READS])
def test_finding_work_scans_no_history_table(ledger, job: str, name: str) -> None:
    engine, bounds = ledger
    scanned = set(_scans(_plan(engine, statements(job)[name], {**PARAMS, **bounds})))
    assert not scanned & HISTORY_TABLES, f"{job}.{name} scans {sorted(scanned & HISTORY_TABLES)}"


# Backlogs of the seeded history's last signals: a hundredth, and a tenth — which the planner
# hash-joins, reading all of ``signals`` once inside command_facts (joined there by key alone,
# beyond any range: hashing all of it costs the planner less than walking a tenth's keys).
BACKLOGS = {2_000: ("signals", "attempts", "command_responses"), 20_000: ("attempts", "command_responses")}


def _node_types(plan: dict[str, Any]) -> Iterator[str]:
    yield plan.get("Node Type", "")
    for child in plan.get("Plans", []):
        yield from _node_types(child)


@pytest.mark.parametrize("backlog", BACKLOGS)
def test_the_validation_gate_reads_a_backlogs_part_of_each_history_table(ledger, backlog: int) -> None:
    """A backlog's slice reads each history table within the slice's range of signal ids, not
    whole (decisions #139: a tenth's hash joins read every row of signals, attempts and
    command_responses, a cost that grew with the history). The range is a literal, so the planner
    sizes each read (BACKLOGS: which tables each backlog holds to its range)."""
    engine, _ = ledger
    moved = ("SET LOCAL session_replication_role = replica; "
             "INSERT INTO ledger_batches (id, step, committed_at) OVERRIDING SYSTEM VALUE "
             "VALUES (999999, 'sweep', now()); "
             "UPDATE request_results SET batch_id = 999999 WHERE signal_id > "
             f"(SELECT max(signal_id) - {backlog} FROM request_results); ANALYZE request_results")
    with engine.connect() as conn:  # the backlog is the history's last signals
        last = conn.execute(text("SELECT max(signal_id) FROM request_results")).scalar_one()
    backlog_slice = validate.slice_of("requests", {"results_after": 999998, "results_upto": 999999,
                                                   "results_first_signal": last - backlog + 1,
                                                   "results_last_signal": last})
    plan = _plans_run(engine, _gate_query("requests", backlog_slice), settings=moved, analyze=True)
    if backlog == max(BACKLOGS):  # the case the ranges are for: without them these hash joins read whole tables
        assert "Hash Join" in set(_node_types(plan)), "a tenth of the history is hash-joined"
    for table in BACKLOGS[backlog]:
        read = _rows_read(plan, table)
        if table == "attempts":
            # a redelivery's rows alone (a tenth of the signals here): the request's attempt, its
            # stored acks' and the next one, about 0.3 times the backlog; attempt 1 is its signal
            # (decisions #146; 1.4 times the backlog before 0034, 2.4 before 0032)
            assert read <= backlog // 2, f"validating a backlog of {backlog} reads {read} rows of attempts"
        else:  # read directly and in command_facts; signals a third time for the requests with stored acks
            most = (3 if table == "signals" else 2) * backlog
            assert backlog <= read <= most, f"validating a backlog of {backlog} reads {read} rows of {table}"


def _current_attempts_read(engine: Any, prepare: Callable[[Any], None] | None = None) -> int:
    """The attempts a window of 20 000 signals' current attempts read (prepare: in the same transaction, first)."""
    with engine.connect() as conn:
        first = conn.execute(text("SELECT max(id) - 20000 FROM signals")).scalar_one()
    plan = _plans_run(engine, "SELECT count(*) FROM current_attempts a WHERE a.signal_id > :first", {"first": first},
                      analyze=True, prepare=prepare)
    return _rows_read(plan, "attempts")


def test_a_windows_current_attempts_read_the_redeliveries_alone(ledger) -> None:
    """Whether a later attempt follows one is asked of the redeliveries (a tenth of the seeded
    signals have an attempt 2), from their index, not of every attempt of the history: the window's
    attempts (one each, and a tenth's second) and the redeliveries at most (decisions #144). The
    definition before 0032 hashed every attempt: the check must catch it."""
    engine, _ = ledger
    with engine.connect() as conn:
        redeliveries = conn.execute(text("SELECT count(*) FROM attempts WHERE attempt > 1")).scalar_one()
    bound = 20_000 * 11 // 10 + redeliveries
    read = _current_attempts_read(engine)
    assert read <= bound, f"a window of 20 000 signals' current attempts read {read} attempts"
    before = _current_attempts_read(engine, lambda conn: objects.create(conn, "current_attempts", "0008"))
    assert before > bound, f"the check misses the definition before 0032 ({before} attempts read)"


@pytest.mark.parametrize("subject", expectations.SUBJECTS)
def test_the_validation_gate_reads_its_slice_alone(ledger, subject: str) -> None:
    """What Great Expectations runs for each subject, its slice where GX puts it."""
    engine, bounds = ledger
    facts = validate.slice_of(subject, bounds)
    assert facts is not None, f"the seeded slice has no {subject}"
    plan = _plan(engine, _gate_query(subject, facts))
    scanned = set(_scans(plan))
    assert not scanned & HISTORY_TABLES, f"validating the {subject} scans {sorted(scanned & HISTORY_TABLES)}: {plan}"


def _gate_query(subject: str, facts: str) -> str:
    """What Great Expectations runs for ``subject``: its invariants over the slice's facts, the
    subject's table where GX puts it."""
    return expectations.unexpected_rows_query(subject, facts).replace("{batch}", expectations.SUBJECT_TABLES[subject])


@pytest.mark.parametrize("name", PULL_READS)
def test_pulling_scans_no_history_table(ledger, name: str) -> None:
    engine, _ = ledger
    with engine.connect() as conn:  # a subscriber far into the log: the position is near its end
        position = conn.execute(text("SELECT max(id) - 10 FROM thing_events")).scalar_one()
    sql = load(LEDGER_SQL / "handouts.sql")[name]
    plan = _plans_run(engine, sql, {**PULL_PARAMS, "position": position})
    assert plan["Plans"], f"handouts.{name} ran no statement"
    scanned = set(_scans(plan))
    assert not scanned & HISTORY_TABLES, f"handouts.{name} scans {sorted(scanned & HISTORY_TABLES)}: {plan}"


@pytest.mark.parametrize("view", ["report_settlement_status", "report_audit"])
def test_the_report_views_scan_no_history_table(ledger, view: str) -> None:
    engine, _ = ledger
    scanned = set(_scans(_plan(engine, f"SELECT * FROM {view}")))
    if view == "report_settlement_status":
        # Its decided / carried-out counts tally every decision ever made, per source, by design
        # (an auditor's count); only its pending part must come from the queues.
        scanned -= {"settlements", "signals"}
    assert not scanned & HISTORY_TABLES, f"{view} scans {sorted(scanned & HISTORY_TABLES)}"


# What a connector reads on every poll and every batch (ackstore/ledger/sql/{settlements,ingest}.sql),
# what `result` reads: an answer (request_answers) per request; and the HTTP API's reads of twins.
CONNECTOR_READS = [("settlements", "undone"), ("settlements", "replies"), ("settlements", "record"),
                   ("settlements", "record_latest"), ("ingest", "already_stored"),
                   ("ingest", "lock_retransmitted"), ("ingest", "retransmitted"), ("ingest", "enqueue_copied"),
                   ("results", "latest_result"),
                   ("results", "acks_of"), ("results", "timeline"), ("things", "state"), ("things", "documents"),
                   ("things", "events_after"), ("things", "last_event")]
CONNECTOR_PARAMS = {"source": "amqp:bench", "skip_taken": False, "signal_ids": [1, 2, 3], "attempts": [1, 1, 1],
                    "held": True, "carried_out_as": None,
                    "message_ids": ["m-1", "m-2"], "correlation_ids": ["c-1", "c-2"], "source_message_id": "m-1",
                    "correlation_id": "history-7", "signal_id": 7,
                    "thing_id": "org.acme:t-7", "thing_ids": ["org.acme:t-7", "org.acme:t-8"],
                    "position": 5, "limit": 500}


@pytest.mark.parametrize(("file", "name"), CONNECTOR_READS, ids=[f"{f}.{n}" for f, n in CONNECTOR_READS])
def test_a_connector_scans_no_history_table(ledger, file: str, name: str) -> None:
    engine, bounds = ledger
    params = {**CONNECTOR_PARAMS, "signal_ids": bounds["connection_signals"]}  # its own connection's
    plan = _plans_run(engine, load(LEDGER_SQL / f"{file}.sql")[name], params)
    assert plan["Plans"], f"{file}.{name} ran no statement"
    scanned = set(_scans(plan))
    assert not scanned & HISTORY_TABLES, f"{file}.{name} scans {sorted(scanned & HISTORY_TABLES)}: {plan}"


def test_a_connectors_poll_reads_the_signals_of_its_undone_decisions_alone(ledger) -> None:
    """The poll for decisions to carry out (every second) on the source that stored the history:
    whatever the statistics say — here, as on a young ledger, that half the settlements are
    undone — it reads the signals of undone settlements by their key, never every signal of the
    source (profiled on the broker benchmark: 18 µs a message, growing with the history)."""
    engine, _ = ledger
    undo = ("SET LOCAL session_replication_role = replica; "  # the guard that keeps carried_out_at once set
            "UPDATE settlements SET carried_out_at = NULL, seq = NULL WHERE signal_id IN "
            f"(SELECT id FROM signals WHERE source = '{history.SOURCE}' AND id % 4 = 0); ANALYZE settlements")
    with engine.connect() as conn:
        of_source = conn.execute(text("SELECT count(*) FROM signals WHERE source = :s"),
                                 {"s": history.SOURCE}).scalar_one()
    plan = _plans_run(engine, load(LEDGER_SQL / "settlements.sql")["undone"], {"source": history.SOURCE}, undo,
                      analyze=True)
    (run,) = plan["Plans"]
    undone = run["Actual Rows"]
    assert 0 < undone < of_source / 1.5
    assert _rows_read(run, "signals") <= undone


def test_clearing_abandoned_staging_reads_the_staging_table_alone(ledger) -> None:
    """The pipeline's first step removes what a committed COPY left unmerged (issue 37): a scan of
    the intake's staging table, which holds only batches in flight, never a history table."""
    engine, _ = ledger
    plan = _plans_run(engine, statements("batches")["clear_abandoned_staged_signals"])
    assert plan["Plans"] and set(_scans(plan)) <= {"stage_signals"}, plan


# What ingestion looks up by key, a batch's worth of keys at once (ackstore/ledger/sql/ingest.sql).
# (enqueue_copied looks nothing up since migration 0016: its signals come from the staging table.)
INGEST_LOOKUPS = ["already_stored", "lock_retransmitted"]


def _signal_lookups(plan: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(node type, index condition) of every node that reads signals or one of its indexes."""
    if plan.get("Relation Name") == "signals" or plan.get("Index Name", "").startswith(("pk_signals", "uq_signals")):
        yield plan["Node Type"], plan.get("Index Cond", "")
    for child in plan.get("Plans", []):
        yield from _signal_lookups(child)


@pytest.mark.parametrize("name", INGEST_LOOKUPS)
def test_ingestion_probes_whole_keys_on_a_table_never_analysed(store, name: str) -> None:
    """With autovacuum off (as here) a new ledger's signals may never be analysed: a batch's keys in
    one ANY () list were then planned as a scan of the source's every signal, each batch slower
    than the last. Each key must be one probe of its unique index, whatever the statistics."""
    from tests.support.ledger import twin_command

    for start in range(0, 20_000, 2_000):
        store.submit_many([twin_command(thing=f"org.acme/t{i % 500}", correlation_id=f"c-{i}") for i in range(start, start + 2_000)],
                          api="connectivity", source="conn", source_message_ids=[f"m-{i}" for i in range(start, start + 2_000)])
    keys = {"source": "conn", "message_ids": [f"m-{i}" for i in range(0, 20_000, 20)],
            "correlation_ids": [f"c-{i}" for i in range(0, 20_000, 20)]}
    planned_as_is = "SET LOCAL enable_seqscan = on"  # the planner's own choice, sequential scans allowed
    lookups = list(_signal_lookups(_plans_run(store.engine, load(LEDGER_SQL / "ingest.sql")[name], keys, planned_as_is)))
    assert lookups and all(node != "Seq Scan" for node, _ in lookups), lookups
    assert all(any(key in condition for key in ("source_message_id =", "correlation_id =", "id = ANY"))
               for node, condition in lookups if node != "Bitmap Heap Scan"), lookups


# The windowed reports (ackstore/ledger/sql/reports.sql): a window of the history (10 s of it:
# 10 000 signals) and the last hour (the fresh commands). Each function must be inlined (no
# Function Scan: PostgreSQL plans it with the window) and find its signals by received_at's index.
WINDOWED_REPORTS = ["latency", "watermarks", "unsettled", "late_acks", "labels", "dead_letters"]
WINDOWS = {
    "history": "SELECT now() - interval '30 days' + interval '50 seconds' AS since, "
               "now() - interval '30 days' + interval '60 seconds' AS until",
    "last hour": "SELECT now() - interval '1 hour' AS since, now() AS until",
}


def _function_scans(plan: dict[str, Any]) -> Iterator[str]:
    if plan.get("Node Type") == "Function Scan":
        yield plan.get("Function Name", "")
    for child in plan.get("Plans", []):
        yield from _function_scans(child)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("name", WINDOWED_REPORTS)
def test_a_windowed_report_reads_its_window_alone(ledger, name: str, window: str) -> None:
    engine, _ = ledger
    with engine.connect() as conn:
        bounds = conn.execute(text(WINDOWS[window])).one()._asdict()
    params = {**bounds, "source": None, "limit": 50, "bucket": "1 hour"}
    statements = load(LEDGER_SQL / "reports.sql")
    plan = _plan(engine, statements[name], params, statements["settings"])  # as ledger/reports.py reads it
    scanned = set(_scans(plan))
    assert not scanned & HISTORY_TABLES, f"reports.{name} scans {sorted(scanned & HISTORY_TABLES)}: {plan}"
    assert not {f for f in _function_scans(plan) if f.startswith(("report_", "signal"))}, f"not inlined: {plan}"


# Removing finished work from a queue: each step deletes from its queue what it staged, a join of
# the two. Both tables' statistics are stale by nature — the queue was last analyzed emptied, the
# staging table knows another run's id — and planned as one row each side, the removal of N items
# is a nested loop that visits N² rows (6 000 items took 15 s). The steps refresh each table while
# it holds the run's rows (refresh_statistics: a tenth of what the statistics know, from 100 rows
# on): the queue before the reads that drain it, the staging table before its merge.
REMOVALS = {  # job: (its staging table and a staged row, its queue and a queued row)
    "apply_twin": ("stage_twin_outcomes (run_id, signal_id, thing_id, base_revision, status, is_error, is_last)",
                   "'r', g, 't' || g, 0, 204, false, true", "queue_apply (signal_id)", "g"),
    "sweep": ("stage_results (run_id, signal_id, attempt, status, headers, cause, ack_statuses, acks_seen)",
              "'r', g, 1, 200, '{}', 'acks', '{}', 0", "queue_decide (signal_id, attempt)", "g, 1"),
    "settle": ("stage_settlements (run_id, signal_id, attempt, decision)", "'r', g, 1, 'ack'",
               "queue_settle (signal_id, attempt)", "g, 1"),
}


@pytest.fixture(scope="module")
def queues() -> Iterator[Any]:
    """A ledger whose queues have a history: a backlog of 10 000 removed by a run, each queue then
    analyzed empty and each staging table analyzed with that run's rows, then truncated."""
    with scratch_database(ADMIN_URL, "removals") as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        for job in REMOVALS:
            _stage_and_queue(engine, job, 10_000, first=1, run_id="backlog")
            with engine.begin() as conn:
                conn.execute(statement(job, "dequeue"), {"run_id": "backlog"})
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text(f"ANALYZE {_table(REMOVALS[job][0])}"))
                conn.execute(text(f"TRUNCATE {_table(REMOVALS[job][0])}"))
                conn.execute(text(f"ANALYZE {_table(REMOVALS[job][2])}"))
        yield engine
        engine.dispose()


def _table(columns: str) -> str:
    return columns.split(" ", 1)[0]


def _stage_and_queue(engine: Any, job: str, rows: int, first: int, run_id: str = "r") -> None:
    staging, staged, queue, queued = REMOVALS[job]
    with engine.begin() as conn:
        span = {"a": first, "b": first + rows - 1}
        conn.execute(text(f"INSERT INTO {queue} SELECT {queued} FROM generate_series(:a, :b) g"), span)
        conn.execute(text(f"INSERT INTO {staging} SELECT {staged.replace(chr(39) + 'r' + chr(39), ':run_id', 1)} "
                          "FROM generate_series(:a, :b) g"), {**span, "run_id": run_id})


def _rows_visited(plan: dict[str, Any]) -> float:
    """Every row each node of an executed plan produced or filtered out, times its loops."""
    own = sum(plan.get(key, 0) for key in ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Join Filter",
                                           "Rows Removed by Index Recheck"))
    return own * plan.get("Actual Loops", 1) + sum(_rows_visited(child) for child in plan.get("Plans", []))


def _removal_visits(engine: Any, job: str, rows: int, refreshed: bool) -> float:
    """EXPLAIN ANALYZE the job's removal of ``rows`` staged items, in a transaction rolled back."""
    staging, _, queue, _ = REMOVALS[job]
    _stage_and_queue(engine, job, rows, first=1_000_000)
    try:
        with engine.connect() as conn:
            if refreshed:  # what the steps do while each table holds the run's rows
                for table in (_table(staging), _table(queue)):
                    conn.execute(statement("batches", "refresh_statistics"), {"table": table, "written": rows})
            plan = conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {statements(job)['dequeue']}"),
                                {"run_id": "r"}).scalar_one()
            conn.rollback()
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {_table(staging)}, {_table(queue)}"))
    plan = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    assert plan["Plans"][0]["Actual Rows"] == rows, plan  # it removed them all
    return _rows_visited(plan)


def test_the_removal_check_catches_a_nested_loop_over_the_run(queues) -> None:
    """Without the refresh, 1 000 items planned as one: a nested loop of a million rows."""
    assert _removal_visits(queues, "apply_twin", 1_000, refreshed=False) > 100 * 1_000


@pytest.mark.parametrize("rows", [1_000, 100_000])
@pytest.mark.parametrize("job", REMOVALS)
def test_removing_finished_work_visits_each_item_a_few_times(queues, job: str, rows: int) -> None:
    visited = _removal_visits(queues, job, rows, refreshed=True)
    assert visited <= 10 * rows, f"{job}.dequeue of {rows:,} items visits {visited:,.0f} rows"


# What sealing and proving read (ackstore/ledger/sql/seals.sql): the facts numbered since the last
# seal (the block range indexes on seq), one signal's facts, and the seal that covers a number.
SEAL_READS = ["leaves_in_order", "counts", "facts_of_signal", "covering", "latest", "leaves", "roll_up_metrics",
              "await_facts", "forget_awaited_facts"]


@pytest.fixture(scope="module")
def seals_of_years(ledger) -> Any:
    """The ledger with 100 000 seals (a seal a minute for ten weeks), over numbers far past its own."""
    engine, _ = ledger
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO seals (number, after_seq, upto_seq, counts, leaves, root, previous, hash) "
                          "SELECT n, 1e12::bigint + n - 1, 1e12::bigint + n, '{}', 0, sha256(''), sha256(''), "
                          "sha256(n::text::bytea) FROM generate_series(1, 100000) n"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE seals"))
    return engine


@pytest.mark.parametrize("name", SEAL_READS)
def test_sealing_reads_what_came_since_the_last_seal_alone(seals_of_years, name: str) -> None:
    engine = seals_of_years
    with engine.connect() as conn:
        upto = conn.execute(text("SELECT last_value FROM ledger_seq")).scalar_one()
    params = {"seal": 1, "after_seq": upto - 200, "upto_seq": upto, "per_chunk": 65_536, "seq": upto - 100,
              "correlation_id": "history-7", "cap": METRIC_SOURCES}
    sql = load(LEDGER_SQL / "seals.sql")[name]
    if "COPY (" in sql:  # a COPY's query, as a SELECT with the same parameters
        sql = sql[sql.index("COPY (") + len("COPY ("):sql.rindex(") TO STDOUT")].replace("%(after_seq)s", ":after_seq").replace(
            "%(upto_seq)s", ":upto_seq")
    plan = _plan(engine, sql, params)
    scanned = set(_scans(plan))
    # a seal a minute: 525 600 a year; and the decided attempts awaiting their built-in facts (issue 50)
    history_and_seals = HISTORY_TABLES | {"seals", "seal_leaves", "metric_awaited_facts"}
    assert not scanned & history_and_seals, f"seals.{name} scans {sorted(scanned & history_and_seals)}: {plan}"


@pytest.mark.parametrize("table", ["signals", "acks", "request_results", "settlements"])
def test_verify_reads_a_seals_interval_alone(ledger, table: str) -> None:
    from ackstore.ledger import verify

    engine, _ = ledger
    query = verify._rows(table, 1_000, 1_200).compile(engine, compile_kwargs={"literal_binds": True})
    scanned = set(_scans(_plan(engine, str(query))))
    assert not scanned & HISTORY_TABLES, f"verify's read of {table} scans {sorted(scanned & HISTORY_TABLES)}"


# What the archive lookups read of the hot ledger (ackstore/ledger/archive_lookups.py): the signals asked about, and
# their facts by their keys — a window's cost, never the history's.
@pytest.mark.parametrize("asked", ["window", "correlation id"])
def test_archive_lookups_find_the_signals_asked_about_alone(ledger, asked: str) -> None:
    engine, _ = ledger
    wanted = "history-7" if asked == "correlation id" else Window(
        datetime(2026, 11, 22, 12, tzinfo=timezone.utc), datetime(2026, 11, 22, 13, tzinfo=timezone.utc))
    query = archive_lookups.Hot.signals_query(wanted).compile(engine, compile_kwargs={"literal_binds": True})
    scanned = set(_scans(_plan(engine, str(query))))
    assert not scanned & HISTORY_TABLES, f"archive lookups' signals by {asked} scan {sorted(scanned & HISTORY_TABLES)}"


@pytest.mark.parametrize("table, column", list(archive_lookups.LOOKUPS))
def test_archive_lookups_read_the_facts_of_their_signals_alone(ledger, table: str, column: str) -> None:
    engine, _ = ledger
    query = archive_lookups.Hot.rows_query(table, column, [1, 2, 3], 0).compile(engine, compile_kwargs={"literal_binds": True})
    scanned = set(_scans(_plan(engine, str(query))))
    assert not scanned & HISTORY_TABLES, f"history's {table} by {column} scans {sorted(scanned & HISTORY_TABLES)}"


@pytest.mark.parametrize("name", ["marks", "passes", "archived_horizon", "locations", "archived_in"])
def test_archive_lookups_read_marks_passes_and_archives_by_their_keys(seals_of_years, name: str) -> None:
    engine = seals_of_years
    params = {"things": ["org.acme/t1", "org.acme/t2"], "low": [1, 5], "high": [3, 9], "first": 10, "last": 20,
              "seq": 1_000_000_000_050}
    plan = _plan(engine, load(LEDGER_SQL / "archive_lookups.sql")[name], params)
    scanned = set(_scans(plan))
    assert not scanned & (HISTORY_TABLES | {"seals"}), f"history.{name} scans {sorted(scanned)}: {plan}"


# What a scrape of `ackstore metrics` reads (ackstore/ledger/sql/metrics.sql, issue 38): the totals,
# the facts after the last seal, the queues and each step's last run — never the history, the
# seals (a seal a minute), the run records (seven a minute) or the decided attempts awaiting their
# built-in facts (issue 50: looked for from the new facts, a scrape took 4 s beside 200 000).
@pytest.mark.parametrize("name", ["counters", "gauges", "sources"])
def test_a_scrape_reads_what_came_since_the_last_seal_and_the_open_work_alone(seals_of_years, name: str) -> None:
    engine = seals_of_years
    plan = _plan(engine, load(LEDGER_SQL / "metrics.sql")[name], {"cap": METRIC_SOURCES})
    scanned = set(_scans(plan))
    growing = HISTORY_TABLES | {"seals", "seal_leaves", "pipeline_runs", "archives", "metric_awaited_facts"}
    assert not scanned & growing, f"metrics.{name} scans {sorted(scanned & growing)}: {plan}"


# What `ackstore connection metrics|logs` read (ackstore/ledger/sql/connections.sql): a day of
# the connection's signals and settlements by their time indexes, and its log by its key.
@pytest.mark.parametrize("name", ["known", "metrics", "logs"])
def test_a_connections_metrics_and_log_read_a_day_at_most(ledger, name: str) -> None:
    engine, _ = ledger
    plan = _plan(engine, load(LEDGER_SQL / "connections.sql")[name], {"connection": history.SOURCE, "limit": 100})
    scanned = set(_scans(plan)) | set(_function_scans(plan))
    assert not scanned & (HISTORY_TABLES | {"connection_log"}), f"connections.{name} scans {sorted(scanned)}: {plan}"


# One old command's built-in facts, as the metrics' late facts and the seal's awaited facts read
# them, and its facts as `prove` and the archive job do: its search mark is the first of its
# thing's marks reaching its revision (covering_search_mark; command_facts joins, decisions #142).
FACT_READS = {"builtin_fact_times": "SELECT * FROM builtin_fact_times(:signal)",
              "signal_facts": "SELECT * FROM signal_facts(:signal)"}
LATER_MARKS = ("INSERT INTO search_marks (thing_id, from_revision, to_revision, batch_id, changed) "
               "SELECT :thing, t.top + g - 1, t.top + g, :batch, true FROM generate_series(1, 20000) g, "
               "(SELECT max(to_revision) AS top FROM search_marks WHERE thing_id = :thing) t")


def _visited(plan: dict[str, Any], table: str) -> float:
    """The rows the scans of ``table`` in an analysed plan returned or filtered out, over all their loops."""
    own = sum(plan.get(key, 0) for key in ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck")
              ) * plan.get("Actual Loops", 1) if plan.get("Relation Name") == table else 0
    return own + sum(_visited(child, table) for child in plan.get("Plans", []))


@pytest.mark.parametrize("read", FACT_READS)
def test_a_commands_search_mark_is_read_alone_however_often_its_thing_was_indexed_since(ledger, read: str) -> None:
    """A thing indexed in every pass has a mark a pass: an old command's built-in facts read its own
    mark, not the 20 000 that came after it (a range join on the marks' key read them all)."""
    engine, _ = ledger
    with engine.connect() as conn:
        signal, thing, batch = conn.execute(text(
            "SELECT r.signal_id, s.thing_id, m.batch_id FROM command_responses r JOIN signals s ON s.id = r.signal_id "
            "JOIN search_marks m ON m.thing_id = s.thing_id "
            "AND mark_covers(m.from_revision, m.to_revision, r.revision) "
            "WHERE r.event_id IS NOT NULL ORDER BY r.signal_id LIMIT 1")).one()
        later = {"thing": thing, "batch": batch}
        conn.execute(text(LATER_MARKS), later)
        facts = conn.execute(text(FACT_READS[read]), {"signal": signal}).mappings().all()
        conn.rollback()
    found = {"builtin_fact_times": lambda: {f["label"] for f in facts} == {"twin-persisted", "search-persisted"},
             "signal_facts": lambda: "search_marks" in {f["fact_table"] for f in facts}}
    assert found[read](), facts  # its mark found
    plan = _plans_run(engine, FACT_READS[read], {"signal": signal}, analyze=True,
                      prepare=lambda conn: conn.execute(text(LATER_MARKS), later))
    assert plan["Plans"] and _visited(plan, "search_marks") <= 2, plan
