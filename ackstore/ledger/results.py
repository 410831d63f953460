"""What the ledger answers about a signal: the requester's result, and the whole stored state
``show`` prints — attempts, acks, hand-outs, the checkpoint reached (A.3). Statements:
``sql/results.sql``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from ackstore.ledger import deliveries
from ackstore.ledger.named_sql import ledger_statement


def _sql(name: str) -> Any:
    return ledger_statement("results", name)


def latest(conn: Connection, correlation_id: str) -> Any:
    """The signal's id and the result of its current attempt (status None: undecided); None for
    an unknown correlation id."""
    return conn.execute(_sql("latest_result"), {"correlation_id": correlation_id}).first()


def stored_signal(conn: Connection, correlation_id: str) -> dict[str, Any] | None:
    """The signal's row with its acks, attempts, hand-outs and checkpoint; None if unknown."""
    row = conn.execute(_sql("signal"), {"correlation_id": correlation_id}).mappings().first()
    if row is None:
        return None
    state = {k: _jsonable(v) for k, v in row.items()}
    state["acks"] = [dict(a) for a in conn.execute(_sql("acks_of"), {"signal_id": row["id"]}).mappings()]
    state["attempts"] = _attempts(conn, row["id"])
    state["deliveries"] = deliveries.handouts_of(conn, row["id"])
    state["state"] = _checkpoint(conn, row["id"], state["attempts"][-1])
    return state


def timeline(conn: Connection, signal_id: int) -> list[dict[str, Any]]:
    """Every checkpoint of the signal with its time, in the order it lived them (the view
    ``signal_timeline``): attempt (None: the signal's, not one attempt's), at, checkpoint, label,
    status, detail."""
    return [dict(row) for row in conn.execute(_sql("timeline"), {"signal_id": signal_id}).mappings()]


def _attempts(conn: Connection, signal_id: int) -> list[dict[str, Any]]:
    """Every attempt of a signal: its labels and deadline, its result and its settlement."""
    rows = conn.execute(_sql("attempts_of"), {"signal_id": signal_id}).mappings()
    return [
        {
            "attempt": row["attempt"],
            "requestedAcks": list(row["requested_acks"]),
            "openedAt": _jsonable(row["opened_at"]),
            "deadlineAt": _jsonable(row["deadline_at"]),
            "result": None if row["status"] is None else {
                "status": row["status"], "cause": row["cause"], "decidedAt": _jsonable(row["decided_at"]),
            },
            "settlement": None if row["decision"] is None else {
                "decision": row["decision"],
                "decidedAt": _jsonable(row["settlement_decided_at"]),
                "carriedOutAt": _jsonable(row["carried_out_at"]),
            },
        }
        for row in rows
    ]


def _checkpoint(conn: Connection, signal_id: int, latest: dict[str, Any]) -> str:
    """The furthest checkpoint a signal reached: received, persisted / failed, decided, settled (A.3)."""
    if latest["settlement"] is not None:
        return "settled" if latest["settlement"]["carriedOutAt"] is not None else "decided"
    if latest["result"] is not None:
        return "decided"
    is_error = conn.execute(_sql("response_failed"), {"signal_id": signal_id}).scalar()
    if is_error is None:
        return "received"
    return "failed" if is_error else "persisted"


def _jsonable(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") and value is not None else value
