"""The twins as the pipeline applied them, read for the HTTP API (issue 51): one thing's state,
the documents of the things a search found. Statements: ``sql/things.sql``."""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import Connection

from ackstore.ledger.named_sql import ledger_statement
from ackstore.rules.twin import ThingState


def state(conn: Connection, thing_id: str) -> ThingState:
    """The thing as stored (revision 0 and no document: it never existed)."""
    row = conn.execute(ledger_statement("things", "state"), {"thing_id": thing_id}).first()
    return ThingState(thing_id) if row is None else ThingState(thing_id, row.revision, row.document)


def documents(conn: Connection, thing_ids: Sequence[str]) -> dict[str, Any]:
    """The documents of the existing things among ``thing_ids``, by id."""
    found = conn.execute(ledger_statement("things", "documents"), {"thing_ids": list(thing_ids)})
    return {row.thing_id: row.document for row in found}


def events_after(conn: Connection, position: int, limit: int) -> list[Any]:
    """The twin events after ``position``, oldest first, at most ``limit``."""
    return list(conn.execute(ledger_statement("things", "events_after"), {"position": position, "limit": limit}))


def last_event(conn: Connection) -> int:
    """The event log's last position (0: empty)."""
    return conn.execute(ledger_statement("things", "last_event")).scalar_one()
