"""A connection's metrics and log, as Ditto answers ``GET /connections/{id}/metrics`` and ``…/logs``
(issue 38, decisions #109): what its connector could not do, written by the connector through the
write function ``log_connection_event``; and its counts for the last minute, hour and day, read
from the ledger's facts and that log (``sql/objects/connection_log.sql``); and that its connector
runs (``connector_seen``, issue 50)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from ackstore.ledger.named_sql import ledger_statement
from ackstore.ledger.schema import CONNECTION_EVENTS
from ackstore.rules import errors, limits

SPANS = ("last_minute", "last_hour", "last_day")


def record(conn: Connection, connection: str, kind: str, detail: str, *, message_id: str | None = None,
           happened_at: datetime | None = None) -> None:
    """Log one failure of ``connection``'s connector (``kind``: one of CONNECTION_EVENTS); only
    the connection's login may. Every transport's entries come through here, so here the text a
    sender chose (a message id of any bytes, a reply-to) is made storable: a U+0000 or a lone
    surrogate PostgreSQL's text refuses would lose the whole batch's entries, and hide its drops."""
    if kind not in CONNECTION_EVENTS:
        raise ValueError(f"{kind!r} is none of the connection log's kinds {CONNECTION_EVENTS}")
    conn.execute(ledger_statement("connections", "record"), {
        "connection": connection, "kind": kind, "detail": limits.storable(detail),
        "message_id": limits.storable(message_id) if message_id is not None else None, "happened_at": happened_at})


def seen(conn: Connection, connection: str, broker_out_since: datetime | None) -> None:
    """``connection``'s connector runs (it says so every 15 s), and since when it cannot reach its
    broker (None: it can): what the Ledger page lists connectors by (migration 0025)."""
    conn.execute(ledger_statement("connections", "seen"), {"connection": connection,
                                                           "broker_out_since": broker_out_since})


def stopped(conn: Connection, connection: str) -> None:
    """``connection``'s connector stopped cleanly (decisions #133): stopped, not down, until it says
    it runs again."""
    conn.execute(ledger_statement("connections", "stopped"), {"connection": connection})


def metrics(conn: Connection, connection: str) -> dict[str, dict[str, int]]:
    """Per span (last minute, hour, day), each measure's count; 404 for a connection the ledger
    does not know."""
    _known(conn, connection)
    rows = conn.execute(ledger_statement("connections", "metrics"), {"connection": connection})
    counted = {row.measure: {span: getattr(row, span) for span in SPANS} for row in rows}
    return {span: {measure: counts[span] for measure, counts in counted.items()} for span in SPANS}


def logs(conn: Connection, connection: str, limit: int) -> list[dict[str, Any]]:
    """The connection's newest ``limit`` log entries, newest first; 404 for one the ledger does
    not know."""
    _known(conn, connection)
    rows = conn.execute(ledger_statement("connections", "logs"), {"connection": connection, "limit": limit})
    return [dict(row._mapping) for row in rows]


def _known(conn: Connection, connection: str) -> None:
    if not conn.execute(ledger_statement("connections", "known"), {"connection": connection}).scalar_one():
        raise errors.connection_not_found(connection)
