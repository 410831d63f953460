"""The SQL reports (README, "Reports"): each is a view in the schema; these read them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, text

SETTLEMENT_COLUMNS = ("source", "status", "decision", "requests", "oldest")
AUDIT_COLUMNS = ("signal_id", "correlation_id", "source", "source_message_id", "attempt", "stuck_at", "detail",
                 "received_at", "age")


def settlement_status(conn: Connection, source: str | None = None) -> list[dict[str, Any]]:
    """Per source: requests pending a settlement decision, decided, carried out — by decision."""
    rows = conn.execute(
        text(
            "SELECT source, status, decision, requests, oldest FROM report_settlement_status "
            "WHERE CAST(:source AS text) IS NULL OR source = :source "
            "ORDER BY source, array_position(ARRAY['pending decision', 'decided', 'carried out'], status), decision"
        ),
        {"source": source},
    ).mappings()
    return [dict(row) for row in rows]


def qos1_audit(conn: Connection, limit: int = 50, source: str | None = None) -> list[dict[str, Any]]:
    """Signals received but not yet answered or settled, oldest first, with where they are stuck."""
    rows = conn.execute(
        text(
            "SELECT signal_id, correlation_id, source, source_message_id, attempt, stuck_at, detail, received_at, age "
            "FROM report_qos1_audit WHERE CAST(:source AS text) IS NULL OR source = :source LIMIT :limit"
        ),
        {"source": source, "limit": limit},
    ).mappings()
    return [dict(row) for row in rows]


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """A report row for JSON: timestamps in ISO 8601, ages in seconds."""
    return {
        key: value.total_seconds() if isinstance(value, timedelta)
        else value.isoformat() if hasattr(value, "isoformat") else value
        for key, value in row.items()
    }
