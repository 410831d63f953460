"""The sweep decides the common case in SQL (jobs/sql/sweep.sql, ``decide_builtin`` and
``decide_common``) and the rest
with :func:`ackstore.rules.aggregation.decide`: on the same generated ledgers, every request SQL
decides gets exactly the answer Python gives it, and SQL decides every request of the common case.

The ledgers hold every shape B.5 and B.6 speak of: no labels, one label, several; built-in labels
derived from facts (twin-persisted from a response, search-persisted from an index mark, weak or
not) and stored custom acks (weak or not, with and without payload, Ditto content types, any
status); acks in time and late; failed twin commands (A.2.7's short-circuit); live responses;
attempts after the first that find their built-in facts already in the ledger (A.2.10).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore.ledger.schema import LEDGER_TABLES
from jobs import sweep
from jobs.sql import statements
from tests.support.generated_requests import DERIVED_ENTRIES, insert_request, request_spec


def _python_decisions(conn: Any) -> dict[tuple[int, int], dict[str, Any]]:
    """What the Spark path decides: the sweep's own read, through aggregation.decide."""
    decided = {}
    for row in conn.execute(text(statements("sweep")["undecided"])).mappings():
        result, _ = sweep.decide_row(dict(row))
        if result is not None:
            decided[(row["signal_id"], row["attempt"])] = {
                "status": result.status, "body": result.to_json()["body"], "headers": dict(result.headers),
                "cause": result.cause, "ack_statuses": dict(result.ack_statuses)}
    return decided


def _sql_decisions(conn: Any) -> tuple[dict[tuple[int, int], dict[str, Any]], dict[tuple[int, int], Any]]:
    """What decide_builtin and decide_common write, read back as every reader sees an answer, and
    each new result's body and headers as stored with whether it holds derived entries or a derived
    plain response (the caller rolls back)."""
    before = set(conn.execute(text("SELECT signal_id, attempt FROM request_results")).all())
    for name in sweep.COMMON_STATEMENTS:
        conn.execute(text(statements("sweep")[name]), {**sweep.COMMON_PARAMS, "batch_id": 0})
    rows = conn.execute(text("SELECT signal_id, attempt, status, body, headers, cause, ack_statuses "
                             "FROM request_answers")).mappings()
    answers = {(r["signal_id"], r["attempt"]): {k: r[k] for k in ("status", "body", "headers", "cause", "ack_statuses")}
               for r in rows if (r["signal_id"], r["attempt"]) not in before}
    stored = {(r.signal_id, r.attempt): (r.body, r.headers, r.derived, r.response) for r in conn.execute(text(
        "SELECT signal_id, attempt, body, headers, holds_derived_entries(body, cause, ack_statuses) AS derived, "
        "holds_derived_response(cause, headers) AS response FROM request_results"))}
    return answers, {key: stored[key] for key in answers}


def _is_common(python: dict[str, Any], requested: list[str], response_required: bool) -> bool:
    """The class decide_common covers, stated over Python's answer."""
    if python["cause"] == "accepted":
        return True
    shortcut = response_required and len(requested) == 1 and requested[0] in ("twin-persisted", "live-response")
    if shortcut:  # the plain response to a persisted change, in time
        return requested == ["twin-persisted"] and python["cause"] == "response" and 200 <= python["status"] < 300
    entries = python["body"].values() if isinstance(python["body"], dict) and len(requested) >= 2 else []
    locations = [entry["headers"]["location"] for entry in entries
                 if isinstance(entry, dict) and "location" in entry.get("headers", {})]
    # decide_builtin writes a location that needs no percent-escaping; decide_common none
    built_in_only = set(requested) <= {"twin-persisted", "search-persisted"}
    located = any("%" in location for location in locations) or (bool(locations) and not built_in_only)
    return (python["cause"] == "acks" and not located
            and all(200 <= status < 300 for status in python["ack_statuses"].values()))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(request_spec, min_size=1, max_size=6))
def test_sql_decides_the_common_case_exactly_as_python_does(engine: Engine, specs: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(t.name for t in LEDGER_TABLES)} RESTART IDENTITY"))
        for n, spec in enumerate(specs, start=1):
            insert_request(conn, n, spec)
    with engine.connect() as conn:
        python = _python_decisions(conn)
        attempts = {(r.signal_id, r.attempt): (list(r.requested_acks), r.response_required) for r in conn.execute(text(
            "SELECT q.signal_id, q.attempt, a.requested_acks, s.response_required FROM queue_decide q "
            "JOIN attempts a USING (signal_id, attempt) JOIN signals s ON s.id = q.signal_id"))}
        sql, stored = _sql_decisions(conn)
        conn.rollback()
    for key, answer in sql.items():
        assert python.get(key) == answer, (key, specs[key[0] - 1])
        # an answer over both built-in labels stores no entry: each is derived where read (decisions #141)
        requested, response_required = attempts[key]
        derived = response_required and sorted(requested) == ["search-persisted", "twin-persisted"]
        body, headers, holds_derived, holds_response = stored[key]
        assert holds_derived == derived and (body == DERIVED_ENTRIES or not derived), (key, specs[key[0] - 1])
        # the built-in-only shortcut's plain response stores neither body nor headers (decisions #143)
        plain = response_required and requested == ["twin-persisted"]
        assert holds_response == plain and (body is None and headers is None or not plain), (key, specs[key[0] - 1])
    for key, answer in python.items():
        assert (key in sql) == _is_common(answer, *attempts[key]), (key, answer, specs[key[0] - 1])


def _unfiltered_read() -> str:
    """The sweep's read without its last line, the filter that leaves out requests awaiting their
    command's response."""
    read = statements("sweep")["undecided"]
    last = read.splitlines()[-1]
    assert last.startswith("  AND NOT awaits_command_response("), last  # after attempt_found's WHERE
    return read.removesuffix(last)


def _awaits_response(spec: dict[str, Any]) -> bool:
    """Independently of the SQL: no response will have been stored (none, or a live signal), and
    the current attempt asked for a built-in ack of the command, or for no ack and a response."""
    live = spec["channel"] == "live"
    labels = spec["second_attempt"] if spec["second_attempt"] is not None else [
        label for label in spec["labels"] if live or label != "live-response"]
    no_response = live or spec["response"] == "none"
    return no_response and (bool({"twin-persisted", "search-persisted"} & set(labels))
                            or (not labels and spec["response_required"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(request_spec, min_size=1, max_size=6))
def test_the_read_leaves_out_exactly_the_requests_awaiting_their_response(
        engine: Engine, specs: list[dict[str, Any]]) -> None:
    """Before the deadlines: the read leaves out what awaits_command_response names — exactly the
    requests the generated ledger gave no response and asked for one — and Python, given each of
    them, answers "not yet"."""
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(t.name for t in LEDGER_TABLES)} RESTART IDENTITY"))
        for n, spec in enumerate(specs, start=1):
            insert_request(conn, n, spec)
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # past the immutable-signals trigger
        conn.execute(text("UPDATE attempts SET deadline_at = now() + interval '1 hour'"))
        conn.execute(text("UPDATE signals SET deadline_at = now() + interval '1 hour'"))  # attempt 1's (#146)
    with engine.connect() as conn:
        read = {(row["signal_id"], row["attempt"]) for row in conn.execute(text(statements("sweep")["undecided"]))
                .mappings()}
        every = {(row["signal_id"], row["attempt"]): dict(row)
                 for row in conn.execute(text(_unfiltered_read())).mappings()}
        conn.rollback()
    left_out = set(every) - read
    assert {key[0] for key in left_out} == {n for n, spec in enumerate(specs, start=1) if _awaits_response(spec)}
    for key in left_out:
        assert sweep.decide_row(every[key])[0] is None, (key, specs[key[0] - 1])
