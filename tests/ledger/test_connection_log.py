"""A connection's metrics and log (issue 38, decisions #109): `ackstore connection metrics|logs ID`
answer from the ledger what Ditto's `/connections/{id}/metrics` and `…/logs` answer — counts for
the last minute, hour and day, recent failures newest first — and only the connection's login
writes its log, which keeps its newest entries alone."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError

from ackstore.ledger import connection_log
from ackstore.ledger.database_url import DatabaseUrl
from tests.support.ledger import count
from tests.support.logins import as_login, logins  # noqa: F401 — the fixture
from tests.support.seeded_ledger import Attempt, Signal, seed

CONNECTION = "plant-log"


def _claim(engine: Engine, connection: str = CONNECTION) -> None:
    """The connection, the tests' login's since a month ago: a time its log keeps is after its claim."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO connections (id, owner_login, claimed_at) "
                          "VALUES (:c, current_user, now() - interval '30 days') ON CONFLICT (id) DO NOTHING"),
                     {"c": connection})


def _record(engine: Engine, kind: str, detail: str, **more) -> None:
    with engine.begin() as conn:
        connection_log.record(conn, CONNECTION, kind, detail, **more)


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "ackstore"), "--database-url", database_url,
                           "connection", *args], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"})


def test_the_counts_of_the_last_minute_hour_and_day_are_the_facts_and_the_log_of_each_span(engine: Engine) -> None:
    """Signals stored, settlements carried out (as the transport carried them out), and the log's
    refusals, each counted in every span it falls in — and nothing of another connection."""
    now = datetime.now(timezone.utc)  # at the test's start: the spans are the database's now, a little later
    ago = {"10s": 10, "30m": 1800, "3h": 3 * 3600, "2d": 2 * 86400}
    origin = now - timedelta(days=3)
    signals = []
    for n, (when, decision) in enumerate([("10s", "ack"), ("30m", "reject"), ("3h", "redeliver"), ("2d", "ack"),
                                          ("10s", "dead-letter"), ("30m", None)]):
        at = (now - origin).total_seconds() - ago[when]
        settlement = None if decision is None else (decision, at, at)
        signals.append(Signal(f"s{n}", CONNECTION, at, [Attempt([], at, at + 1, at, 200, "acks", {}, settlement)]))
    other = (now - origin).total_seconds() - 10
    signals.append(Signal("other", "plant-other", other, [Attempt([], other, other + 1)]))
    seed(engine, origin, signals)
    _claim(engine)
    _record(engine, "dropped", "400 json.invalid", happened_at=now - timedelta(seconds=5))
    _record(engine, "enforced", "403 enforcement", happened_at=now - timedelta(minutes=20))
    _record(engine, "outage", "the broker unavailable", happened_at=now - timedelta(hours=5))
    with engine.connect() as conn:
        got = connection_log.metrics(conn, CONNECTION)
    # each named as every surface names the figure (issue 50): received, not consumed (each message
    # once); carried_out_<as>, not acknowledged (which counts deliveries, copies and nacks included)
    assert got["last_minute"] == {"received": 3, "stored": 2, "dropped": 1, "enforced": 0, "carried_out_ack": 1,
                                  "carried_out_reject": 0, "carried_out_redeliver": 0, "carried_out_dead_letter": 1,
                                  "unsendable": 0, "outage": 0}
    assert got["last_hour"] == {"received": 6, "stored": 4, "dropped": 1, "enforced": 1, "carried_out_ack": 1,
                                "carried_out_reject": 1, "carried_out_redeliver": 0, "carried_out_dead_letter": 1,
                                "unsendable": 0, "outage": 0}
    assert got["last_day"] == {"received": 7, "stored": 5, "dropped": 1, "enforced": 1, "carried_out_ack": 1,
                               "carried_out_reject": 1, "carried_out_redeliver": 1, "carried_out_dead_letter": 1,
                               "unsendable": 0, "outage": 1}


def test_only_the_connections_login_writes_its_log(engine: Engine, database_url: str, logins) -> None:  # noqa: F811
    ingest = create_engine(DatabaseUrl.parse(as_login(database_url, logins["ackstore_ingest"])).sqlalchemy())
    reporter = create_engine(DatabaseUrl.parse(as_login(database_url, logins["ackstore_reporter"])).sqlalchemy())
    try:
        _claim(engine)  # claimed by the tests' own login, not the ingest login's
        for who in (ingest, reporter):
            with pytest.raises(DBAPIError) as refused:
                with who.begin() as conn:
                    connection_log.record(conn, CONNECTION, "dropped", "forged")
            assert "permission denied" in str(refused.value.orig) or "not this login" in str(refused.value.orig)
        with engine.begin() as conn:  # the operator reserves it for the ingest login (issue 50)
            conn.execute(text("SELECT reserve_connection('mine', :login)"), {"login": logins["ackstore_ingest"]})
        with ingest.begin() as conn:
            assert conn.execute(text("SELECT claim_connection('mine')")).scalar_one()
            connection_log.record(conn, "mine", "dropped", "a poison message")
        with reporter.connect() as conn:  # the reporter reads it
            assert [e["detail"] for e in connection_log.logs(conn, "mine", 10)] == ["a poison message"]
    finally:
        ingest.dispose()
        reporter.dispose()
    assert count(engine, "SELECT count(*) FROM connection_log WHERE detail = 'forged'") == 0


def test_the_log_keeps_the_newest_entries_clipped_and_never_in_the_future(engine: Engine) -> None:
    _claim(engine)
    with engine.begin() as conn:
        for n in range(1005):
            connection_log.record(conn, CONNECTION, "dropped", f"entry {n}")
        connection_log.record(conn, CONNECTION, "unsendable", "x" * 5000, message_id="m" * 5000,
                              happened_at=datetime.now(timezone.utc) + timedelta(days=1))
    with engine.connect() as conn:
        entries = connection_log.logs(conn, CONNECTION, 1000)
    assert len(entries) == 1000 and count(engine, "SELECT count(*) FROM connection_log") == 1000
    newest = entries[0]
    assert (len(newest["detail"]), len(newest["message_id"])) == (2000, 1000)
    assert newest["happened_at"] <= datetime.now(timezone.utc)
    assert [e["detail"] for e in entries[1:3]] == ["entry 1004", "entry 1003"]
    assert entries[-1]["detail"] == "entry 6"


def test_the_cli_answers_tables_json_and_dittos_404(engine: Engine, database_url: str) -> None:
    _claim(engine)
    _record(engine, "dropped", "400 json.invalid: \x1b[31mred\x1b]8;;http://x\x07", message_id="m\x1b[2J")
    table = _cli(database_url, "logs", CONNECTION)
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout and "\\x1b" in table.stdout  # a sender's text is shown, never obeyed
    logs = json.loads(_cli(database_url, "logs", CONNECTION, "--json").stdout)
    assert logs["connectionId"] == CONNECTION and logs["logs"][0]["message_id"] == "m\x1b[2J"  # exact once parsed
    metrics = _cli(database_url, "metrics", CONNECTION)
    assert metrics.returncode == 0 and "last minute" in metrics.stdout and "dropped" in metrics.stdout
    assert json.loads(_cli(database_url, "metrics", CONNECTION, "--json").stdout)["last_day"]["dropped"] == 1
    unknown = _cli(database_url, "metrics", "nobody's")
    assert unknown.returncode == 1
    assert {k: json.loads(unknown.stdout)[k] for k in ("status", "error")} == {
        "status": 404, "error": "connectivity:connection.notfound"}
    too_many = _cli(database_url, "logs", CONNECTION, "--limit", "0")
    assert too_many.returncode == 1 and json.loads(too_many.stdout)["status"] == 400


@pytest.mark.parametrize("given", ["0001-01-01 00:00:00+00", "0044-03-15 12:00:00+00 BC", "-infinity"])
def test_a_logged_time_before_the_claim_is_the_claims_and_every_reader_shows_it(engine: Engine, database_url: str,
                                                                              given: str) -> None:
    """A connector's clock of year 1 or BC (issue 50): no reader's clock holds such a time, and
    `connection logs` was a traceback; the log keeps a time between the connection's claim and now."""
    _claim(engine)
    with engine.begin() as conn:
        conn.execute(text("SELECT log_connection_event(:c, 'outage', 'long ago', NULL, CAST(:t AS timestamptz))"),
                     {"c": CONNECTION, "t": given})
        claimed = conn.execute(text("SELECT claimed_at FROM connections WHERE id = :c"), {"c": CONNECTION}).scalar_one()
    with engine.connect() as conn:
        (entry,) = connection_log.logs(conn, CONNECTION, 10)
    assert entry["happened_at"] == claimed
    table = _cli(database_url, "logs", CONNECTION)
    assert table.returncode == 0 and "long ago" in table.stdout and "Traceback" not in table.stderr, table.stderr
    logs = json.loads(_cli(database_url, "logs", CONNECTION, "--json").stdout)
    assert logs["logs"][0]["detail"] == "long ago"
    assert _cli(database_url, "metrics", CONNECTION).returncode == 0
