"""Attempt 1 is its signal (decisions #146–#148): every reader takes attempt 1's labels, opening and
deadline from the signal, and answers as the readers before it did from attempt 1's row — on
ledgers written so far, which hold that row, and on ledgers written without it.

On generated ledgers (every shape of :mod:`tests.support.generated_requests`, some redelivered
twice, their facts' batches moved so that a fact comes before, between or after the attempts'
openings, deadlines and decisions; a custom label declared, for weak acks), each reader is read
twice: as it was before (its superseded definition, ``BEFORE``; for ``signal_attempts``, the rows of
``attempts`` themselves) over the ledger as written, attempt 1's rows included; and as it is now,
with attempt 1's rows deleted. Every answer must be the same. The sweep's and weak acks' statements
(jobs/sql, not versioned: no earlier definition to run) are read as they are now, with the rows and
without: they must not depend on them; tests/ledger/test_aggregation_python_and_sql.py holds what
they decide to Python's rules.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, Engine, text

from ackstore.ledger import objects
from ackstore.ledger.schema import LEDGER_TABLES
from jobs import sweep
from jobs.sql import statements
from tests.support.generated_requests import CUSTOM, DEADLINE, T0, insert_request, request_spec

# The migrations that made the readers take attempt 1 from its signal.
CONVERTING = ("0035", "0036")


def _before() -> dict[str, str]:
    """Each object the converting migrations replaced, with its version before them (one they made
    anew, signal_attempts, has none)."""
    earlier: dict[str, str] = {}
    for name, version in sorted(objects.stored()):  # in version order: the last kept is the newest
        if version < CONVERTING[0]:
            earlier[name] = version
    return {name: earlier[name] for name, version in objects.stored() if version in CONVERTING and name in earlier}


BEFORE = _before()
# What signal_attempts answers, from the rows of attempts.
STORED_ATTEMPTS = ("SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at, n.opened_at "
                   "FROM attempts a LEFT JOIN attempts n ON n.signal_id = a.signal_id AND n.attempt = a.attempt + 1")
EVER = "'2000-01-01', '2100-01-01'"  # a report's window holding every signal
QUERIES = {  # the views read whole, the functions over every signal or decision, the reports over every signal
    "signal_attempts": "SELECT * FROM signal_attempts",
    "builtin_acks": "SELECT * FROM builtin_acks",
    "request_acks": "SELECT * FROM request_acks",
    "current_attempts": "SELECT * FROM current_attempts",
    "current_attempt_of": "SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at "
                          "FROM signals s CROSS JOIN LATERAL current_attempt_of(s.id) a",
    "signal_timeline": "SELECT * FROM signal_timeline",
    "report_audit": "SELECT signal_id, attempt, stuck_at, detail FROM report_audit",  # not its age: now()
    "report_labels": f"SELECT * FROM report_labels({EVER}, NULL)",
    "report_late_acks": f"SELECT * FROM report_late_acks({EVER}, NULL)",
    "late_builtin_acks": "SELECT s.id, l.* FROM signals s CROSS JOIN LATERAL late_builtin_acks(s.id) l",
    "builtin_facts_to_come": "SELECT r.signal_id, r.attempt, f.label FROM request_results r "
                             "CROSS JOIN LATERAL builtin_facts_to_come(r.signal_id, r.attempt, 9e15::bigint) f",
    "metric_facts": "SELECT * FROM metric_facts(0, NULL)",
}
READS = (("sweep", "undecided"), ("sweep", "undecided_bounds"), ("weak_acks", "candidate_bounds"),
         ("weak_acks", "candidates"))
RUN = "differential"

# A third attempt: attempt 2 decided at its deadline and redelivered again, the same labels asked.
THIRD_OPENED, THIRD_DEADLINE = timedelta(seconds=50), timedelta(seconds=60)
SECOND_DEADLINE = timedelta(seconds=40)
# How far a batch's commit moves: its facts before, between or after the attempts (30 s, 50 s).
SHIFTS = (0, 25, 45)


def _redeliver_again(conn: Connection, n: int, labels: list[str]) -> None:
    conn.execute(text("INSERT INTO request_results (signal_id, attempt, status, headers, cause, decided_at, batch_id) "
                      "VALUES (:n, 2, 408, '{}', 'deadline', :at, 0)"), {"n": n, "at": T0 + SECOND_DEADLINE})
    conn.execute(text("INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at) "
                      "VALUES (:n, 3, CAST(:labels AS text[]), :opened, :deadline)"),
                 {"n": n, "labels": labels, "opened": T0 + THIRD_OPENED, "deadline": T0 + THIRD_DEADLINE})
    conn.execute(text("UPDATE queue_decide SET attempt = 3 WHERE signal_id = :n"), {"n": n})


def _read(conn: Connection, before: bool) -> dict[str, Any]:
    """Every answer of every reader, in a set order: as the readers were before (their superseded
    definitions, rolled back after) or as they are."""
    saved = conn.begin_nested()
    if before:
        conn.exec_driver_sql("DROP FUNCTION current_attempt_of(bigint)")  # 0036 changed its type
        for name, revision in BEFORE.items():
            objects.create(conn, name, revision)
    answers: dict[str, Any] = {name: _rows(conn, STORED_ATTEMPTS if before and name == "signal_attempts" else query,
                                           {}) for name, query in QUERIES.items()}
    saved.rollback()
    for job, name in READS:
        answers[f"{job}.{name}"] = _rows(conn, statements(job)[name], {})
    saved = conn.begin_nested()  # the statements that write, rolled back
    conn.execute(text("INSERT INTO stage_results (run_id, signal_id, attempt, status, headers, cause, ack_statuses, "
                      "acks_seen) SELECT :run, signal_id, attempt, 408, '{}', 'deadline', '{}', 0 FROM queue_decide"),
                 {"run": RUN})  # each request decided by its deadline on a read that saw no ack
    answers["sweep.late_acks"] = _rows(conn, statements("sweep")["late_acks"], {"run_id": RUN})
    conn.execute(text(statements("sweep")["defer_outdated"]), {"run_id": RUN})
    answers["sweep.defer_outdated"] = _rows(conn, "SELECT signal_id, attempt FROM stage_results", {})
    for name in sweep.COMMON_STATEMENTS:
        conn.execute(text(statements("sweep")[name]), {**sweep.COMMON_PARAMS, "batch_id": 0})
    answers["sweep.decided"] = _rows(conn, "SELECT signal_id, attempt, status, body, headers, cause, ack_statuses "
                                           "FROM request_results", {})
    saved.rollback()
    return answers


def _rows(conn: Connection, query: str, params: dict[str, Any]) -> list[str]:
    return sorted(repr(tuple(row)) for row in conn.execute(text(query), params))


requests = st.lists(st.tuples(request_spec, st.booleans()), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=requests, shifts=st.lists(st.sampled_from(SHIFTS), min_size=12, max_size=12))
def test_every_converted_reader_answers_the_same_without_rows_of_attempt_1(
        engine: Engine, drawn: list[tuple[dict[str, Any], bool]], shifts: list[int]) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(t.name for t in LEDGER_TABLES)} RESTART IDENTITY"))
        conn.execute(text("INSERT INTO subscribers (id, holder, channels) VALUES ('s', 'subscriber:s', '{twin,live}')"))
        conn.execute(text("INSERT INTO declared_labels (label, holder) VALUES (:l, 'subscriber:s')"), {"l": CUSTOM[0]})
        for n, (spec, third) in enumerate(drawn, start=1):
            insert_request(conn, n, spec)
            if third and spec["second_attempt"] is not None:
                _redeliver_again(conn, n, spec["second_attempt"])
        for batch, shift in enumerate(shifts, start=1):
            conn.execute(text("UPDATE ledger_batches SET committed_at = committed_at + make_interval(secs => :s) "
                              "WHERE id = :b"), {"s": shift, "b": batch})
    with engine.connect() as conn:
        stored = _read(conn, before=True)
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # a superuser, the guards' triggers off
        gone = conn.execute(text("DELETE FROM attempts WHERE attempt = 1")).rowcount
        conn.execute(text("SET LOCAL session_replication_role = origin"))  # and on again for the reads
        derived = _read(conn, before=False)
        conn.rollback()
    assert gone == len(drawn)
    moved = [reader for reader, answer in stored.items() if derived[reader] != answer]
    assert moved == [], {reader: (stored[reader], derived[reader]) for reader in moved[:1]}


def test_the_generated_ledgers_reach_every_attempt_and_disposition(engine: Engine) -> None:
    """What the property leans on: a ledger of the generator holds built-in acks of attempts 1, 2
    and 3, counted and late, and stored acks whose disposition their deadline decides."""
    spec = {"channel": "twin", "api": "http", "response_required": True,
            "labels": ["twin-persisted", "search-persisted"], "response": "modified", "persisted_late": True,
            "indexed": "changed", "indexed_late": False, "acks": {"x:a": {
                "status": 200, "payload": None, "json_null": False, "weak": False, "late": True, "headers": {}}},
            "second_attempt": ["twin-persisted", "search-persisted"], "headers": {}}
    with engine.begin() as conn:
        insert_request(conn, 1, {**spec, "labels": ["twin-persisted", "search-persisted", "x:a"]})
        _redeliver_again(conn, 1, spec["second_attempt"])
        conn.execute(text("UPDATE ledger_batches SET committed_at = committed_at + interval '45 s' "
                          "WHERE step = 'index_search'"))  # indexed at 50 s: as attempt 3 opens
        builtin = set(conn.execute(text("SELECT attempt, label, disposition FROM builtin_acks")).all())
        stored = set(conn.execute(text("SELECT attempt, label, disposition FROM request_acks WHERE id IS NOT NULL")))
    # twin-persisted at 20 s: late for attempt 1 (deadline 10 s), counted by 2 and 3, which opened after it;
    # search-persisted at 50 s: attempt 3's (it opened then), not 1's or 2's (a later attempt had opened)
    assert builtin == {(1, "twin-persisted", "late"), (2, "twin-persisted", "counted"),
                       (3, "twin-persisted", "counted"), (3, "search-persisted", "counted")}
    assert stored == {(1, "x:a", "late")} and DEADLINE < timedelta(seconds=20)
