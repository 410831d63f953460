"""The twins as the pipeline applied them, read for the HTTP API (issue 51): one thing's state,
the documents of the things a search found. Statements: ``sql/things.sql``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sqlalchemy import Connection, Engine

from ackstore.ledger.named_sql import ledger_statement
from ackstore.rules import rql
from ackstore.rules.twin import ThingState


@dataclass(frozen=True)
class Read:
    """A thing as a read answers it: its state, and when it last changed (Ditto's ``_modified``,
    ISO-8601 in UTC; None for a thing that never existed)."""

    state: ThingState
    modified: str | None = None


def read(conn: Connection, thing_id: str) -> Read:
    """The thing as stored (revision 0 and no document: it never existed)."""
    row = conn.execute(ledger_statement("things", "state"), {"thing_id": thing_id}).first()
    return Read(ThingState(thing_id)) if row is None else _read(thing_id, row)


def documents(conn: Connection, thing_ids: Sequence[str]) -> dict[str, Read]:
    """The existing things among ``thing_ids``, by id."""
    found = conn.execute(ledger_statement("things", "documents"), {"thing_ids": list(thing_ids)})
    return {row.thing_id: _read(row.thing_id, row) for row in found}


def read_documents(engine: Engine, thing_ids: Sequence[str]) -> dict[str, Read]:
    """:func:`documents`, on a connection of its own (a door's reads: each its own)."""
    with engine.connect() as conn:
        return documents(conn, thing_ids)


def _read(thing_id: str, row: Any) -> Read:
    return Read(ThingState(thing_id, row.revision, row.document), rql.timestamp(row.updated_at))


def events_after(conn: Connection, position: int, limit: int) -> list[Any]:
    """The twin events after ``position``, oldest first, at most ``limit``."""
    return list(conn.execute(ledger_statement("things", "events_after"), {"position": position, "limit": limit}))


def last_event(conn: Connection) -> int:
    """The event log's last position (0: empty)."""
    return conn.execute(ledger_statement("things", "last_event")).scalar_one()
