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

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore.ledger.schema import LEDGER_TABLES
from jobs import sweep
from jobs.sql import statements

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)  # every deadline has passed: Python decides every request
DEADLINE = timedelta(seconds=10)
IN_TIME, LATE = timedelta(seconds=5), timedelta(seconds=20)
CUSTOM = ("x:a", "x:b")
DITTO_JSON = "application/vnd.eclipse.ditto+json"
DERIVED_ENTRIES = {"twin-persisted": None, "search-persisted": None}  # derived_builtin_body()

ack_spec = st.fixed_dictionaries({
    "status": st.sampled_from([200, 200, 201, 204, 204, 400, 408, 424, 503]),  # mostly 2xx: the common case
    "payload": st.sampled_from([None, {"ok": 1}, "text", [], 0, DERIVED_ENTRIES]),  # a sender may send the form
    "json_null": st.booleans(),  # a JSON null payload, as distinct from none
    "weak": st.booleans(),
    "late": st.sampled_from([False, False, False, True]),
    "headers": st.sampled_from([{}, {"content-type": DITTO_JSON}, {"content-type": "text/plain"},
                                {"requested-acks": ["x:a"], "custom": "kept"}]),
})

request_spec = st.fixed_dictionaries({
    "channel": st.sampled_from(["twin", "twin", "live"]),
    "api": st.sampled_from(["http", "websocket", "connectivity"]),
    "response_required": st.booleans(),
    "labels": st.one_of(  # built-in labels alone (the bulk of real traffic), or any mix
        st.lists(st.sampled_from(["twin-persisted", "search-persisted"]), unique=True, max_size=2),
        st.lists(st.sampled_from(["twin-persisted", "search-persisted", "live-response", *CUSTOM]), unique=True,
                 max_size=3)),
    # "marked": a created value that equals the stored form of derived entries (derived_builtin_body)
    "response": st.sampled_from(["none", "created", "marked", "modified", "modified", "modified", "error"]),
    "persisted_late": st.sampled_from([False, False, False, True]),
    "indexed": st.sampled_from(["no", "changed", "changed", "unchanged"]),
    "indexed_late": st.sampled_from([False, False, False, True]),
    "acks": st.dictionaries(st.sampled_from(["live-response", *CUSTOM]), ack_spec, min_size=1, max_size=3),
    "second_attempt": st.one_of(st.none(), st.lists(st.sampled_from(["twin-persisted", "search-persisted", *CUSTOM]),
                                                    unique=True, min_size=1, max_size=2)),
    "headers": st.sampled_from([{}, {"custom-header": "v"}, {"timeout": "10s"}]),
})


def _insert(conn: Any, n: int, spec: dict[str, Any]) -> None:
    """One request as the ingestion and the pipeline leave it (rows written directly)."""
    # Every third thing's id needs percent-escaping in a location header (wire.location).
    cid, thing, live = f"c{n}", f"org.acme:t{'%' if n % 3 == 0 else ''}{n}", spec["channel"] == "live"
    labels = [label for label in spec["labels"] if live or label != "live-response"]
    headers = {**spec["headers"], "correlation-id": cid, "requested-acks": labels,
               "response-required": spec["response_required"]}
    conn.execute(text(
        "INSERT INTO signals (id, source, source_message_id, correlation_id, api, channel, kind, action, thing_id, "
        "topic, path, value, headers, requested_acks, response_required, timeout_ms, received_at, deadline_at) "
        "VALUES (:n, 'api', :cid, :cid, :api, :channel, :kind, 'modify', :thing, 'x', :path, '1', "
        "CAST(:headers AS jsonb), CAST(:labels AS text[]), :rr, 10000, :t0, :deadline)"),
        {"n": n, "cid": cid, "api": spec["api"], "channel": spec["channel"],
         "kind": "live-message" if live else "twin-command", "thing": thing, "path": "/" if n % 2 else "/attributes/a",
         "headers": json.dumps(headers), "labels": labels, "rr": spec["response_required"], "t0": T0,
         "deadline": T0 + DEADLINE})
    conn.execute(text("INSERT INTO queue_decide (signal_id, attempt) VALUES (:n, 1)"), {"n": n})
    if not live and spec["response"] != "none":
        batch = _batch(conn, "apply_twin", LATE if spec["persisted_late"] else IN_TIME)
        error = spec["response"] == "error"
        conn.execute(text(
            "INSERT INTO command_responses (signal_id, status, payload, is_error, batch_id, event_id, revision, "
            "event_action) VALUES (:n, :status, CAST(:payload AS jsonb), :error, :batch, :event, :revision, :action)"),
            {"n": n, "status": {"created": 201, "marked": 201, "modified": 204, "error": 404}[spec["response"]],
             "payload": None if spec["response"] == "modified" else json.dumps(
                 DERIVED_ENTRIES if spec["response"] == "marked" else {"thingId": thing}),
             "error": error,
             "batch": batch, "event": None if error else n, "revision": None if error else 1,
             "action": None if error else "created"})
        if not error and spec["indexed"] != "no":
            conn.execute(text("INSERT INTO search_marks (thing_id, from_revision, to_revision, batch_id, changed) "
                              "VALUES (:thing, 0, 1, :batch, :changed)"),
                         {"thing": thing, "changed": spec["indexed"] == "changed",
                          "batch": _batch(conn, "index_search", LATE if spec["indexed_late"] else IN_TIME)})
    for label, ack in spec["acks"].items():
        if label == "live-response" and not live:
            continue
        payload = "null" if ack["json_null"] else (None if ack["payload"] is None else json.dumps(ack["payload"]))
        ack_headers = {**ack["headers"], **({"ditto-weak-ack": True} if ack["weak"] else {})}
        conn.execute(text(
            "INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, "
            "disposition) VALUES (:n, 1, :label, :status, CAST(:payload AS jsonb), CAST(:headers AS jsonb), 'sub', "
            ":weak, :at, 'counted')"),
            {"n": n, "label": label, "status": ack["status"], "payload": payload, "headers": json.dumps(ack_headers),
             "weak": ack["weak"], "at": T0 + (LATE if ack["late"] else IN_TIME)})
    if spec["second_attempt"] is not None:  # redelivered: attempt 2 requests these labels again
        conn.execute(text("INSERT INTO request_results (signal_id, attempt, status, headers, cause, decided_at, "
                          "batch_id) VALUES (:n, 1, 424, '{}', 'deadline', :at, 0)"), {"n": n, "at": T0 + DEADLINE})
        conn.execute(text("INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at) "
                          "VALUES (:n, 2, CAST(:labels AS text[]), :opened, :deadline)"),
                     {"n": n, "labels": spec["second_attempt"], "opened": T0 + timedelta(seconds=30),
                      "deadline": T0 + timedelta(seconds=40)})
        conn.execute(text("UPDATE queue_decide SET attempt = 2 WHERE signal_id = :n"), {"n": n})


def _batch(conn: Any, step: str, after: timedelta) -> int:
    return conn.execute(text("INSERT INTO ledger_batches (step, committed_at) VALUES (:step, :at) RETURNING id"),
                        {"step": step, "at": T0 + after}).scalar_one()


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
            _insert(conn, n, spec)
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
    assert last.startswith("WHERE NOT awaits_command_response("), last
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
            _insert(conn, n, spec)
        conn.execute(text("UPDATE attempts SET deadline_at = now() + interval '1 hour'"))
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
