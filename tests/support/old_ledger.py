"""A ledger built by the old data model (migration 0006's head), kept as data, and the answers it
gave: the migration to the lean model must move it without changing any answer.

``tests/support/data/ledger_0006.json`` holds every row of every table of that ledger and what the old
code answered for it (:func:`answers`). It was written by ``tests/support/old_ledger_build.py`` running on
the old code (see that file for how to build it again). :func:`load` puts the rows into a
database migrated to 0006; the test then upgrades it and asks the new code the same questions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from ackstore.ledger import reports
from ackstore.ledger.store import AckStore

FIXTURE = Path(__file__).resolve().parent / "data" / "ledger_0006.json"
REVISION = "0006"

# Questions whose answers do not depend on when they are asked.
SEARCHES = ("exists(thingId)", "eq(attributes/n,1)", "exists(attributes/on)", "ne(attributes/n,1)")


def answers(store: AckStore) -> dict[str, Any]:
    """Everything a user can ask of the ledger that must survive the migration."""
    with store.engine.connect() as conn:
        correlation_ids = list(conn.execute(text("SELECT correlation_id FROM signals ORDER BY id")).scalars())
        status = reports.settlement(conn)
        audit = [{k: v for k, v in row.items() if k != "age"} for row in reports.audit(conn, limit=1000)]
        events = [dict(row) for row in conn.execute(text(
            "SELECT id, thing_id, revision, signal_id, action, path, value, headers, created_at "
            "FROM thing_events ORDER BY id")).mappings()]
        things = [dict(row) for row in conn.execute(text(
            "SELECT thing_id, revision, document, deleted FROM things ORDER BY thing_id")).mappings()]
        positions = [dict(row) for row in conn.execute(text(
            "SELECT id, event_position FROM subscribers ORDER BY id")).mappings()]
    return plain({
        "results": {cid: store.result(cid) for cid in correlation_ids},
        "show": {cid: store.stored_signal(cid) for cid in correlation_ids},
        "settlement_status": status,
        "audit": audit,
        "search": {expression: store.search(expression) for expression in SEARCHES},
        "events": events,
        "things": things,
        "subscriber_positions": positions,
    })


def plain(value: Any) -> Any:
    """JSON's own form (timestamps as ISO text), so stored and fresh answers compare equal."""
    return json.loads(json.dumps(value, default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v)))


def dump(engine: Engine, tables: list[str]) -> dict[str, Any]:
    """Every row of ``tables`` (in that order: parents first) and the identity sequences."""
    rows: dict[str, list[Any]] = {}
    with engine.connect() as conn:
        for table in tables:
            rows[table] = list(conn.execute(text(  # our own table names, never input
                f"SELECT COALESCE(json_agg(t ORDER BY t), '[]') FROM {table} t")).scalar_one())
        sequences = {
            name: value for name, value in conn.execute(text(
                "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'public' "
                "AND last_value IS NOT NULL"))
        }
    return {"tables": tables, "rows": rows, "sequences": sequences}


def load(engine: Engine, data: dict[str, Any], *, triggers: bool = True) -> None:
    """Put a dumped ledger into a database migrated to the revision it was dumped at. Without
    ``triggers``, as a restore loads: no trigger writes a row of its own (since 0008, a signal's
    attempt 1) or refuses one already sealed; the dump holds them all."""
    with engine.begin() as conn:
        if not triggers:
            conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text(f"TRUNCATE {', '.join(data['tables'])}"))  # rows the migrations wrote (watermarks)
        for table in data["tables"]:
            if data["rows"][table]:
                conn.execute(text(  # our own table names, never input
                    f"INSERT INTO {table} OVERRIDING SYSTEM VALUE "
                    f"SELECT * FROM json_populate_recordset(NULL::{table}, CAST(:rows AS json))"),
                    {"rows": json.dumps(data["rows"][table])})
        for sequence, value in data["sequences"].items():
            conn.execute(text("SELECT setval(CAST(:s AS regclass), :v)"), {"s": sequence, "v": value})


def fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())
