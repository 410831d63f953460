"""Generated requests as the ingestion and the pipeline leave them, rows written directly: every
shape B.5 and B.6 speak of (no labels, one, several; built-in labels derived from facts,
twin-persisted from a response and search-persisted from an index mark, weak or not; stored custom
acks, weak or not, with and without payload, Ditto content types, any status; acks in time and late;
failed twin commands; live responses; attempts after the first that find their built-in facts
already in the ledger, A.2.10). The property tests of tests/ledger/ draw ledgers from them.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st
from sqlalchemy import text

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


def insert_request(conn: Any, n: int, spec: dict[str, Any]) -> None:
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
        batch = new_batch(conn, "apply_twin", LATE if spec["persisted_late"] else IN_TIME)
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
                          "batch": new_batch(conn, "index_search", LATE if spec["indexed_late"] else IN_TIME)})
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


def new_batch(conn: Any, step: str, after: timedelta) -> int:
    return conn.execute(text("INSERT INTO ledger_batches (step, committed_at) VALUES (:step, :at) RETURNING id"),
                        {"step": step, "at": T0 + after}).scalar_one()
