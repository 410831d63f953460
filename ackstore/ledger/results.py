"""What the ledger answers about a signal: the requester's result, and the whole stored state
``show`` prints — attempts, acks, hand-outs, where it stands, its timeline (A.3). Statements:
``sql/results.sql``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from ackstore.ledger import handouts
from ackstore.ledger.named_sql import ledger_statement


# The sweep's NOTIFY channel: decisions were committed (jobs/sql/sweep.sql, notify_decided).
DECISIONS_CHANNEL = "ackstore_decisions"


def _sql(name: str) -> Any:
    return ledger_statement("results", name)


def latest(conn: Connection, correlation_id: str) -> Any:
    """The signal's id and the result of its current attempt (status None: undecided); None for
    an unknown correlation id."""
    return conn.execute(_sql("latest_result"), {"correlation_ids": [correlation_id]}).first()


def answer(row: Any) -> dict[str, Any]:
    """What the requester is told, from a decided :func:`latest` row: its status, body and headers."""
    return {"status": row.status, "body": row.body, "headers": row.headers}


def latest_of(conn: Connection, correlation_ids: list[str]) -> dict[str, Any]:
    """:func:`latest` of many correlation ids in one statement, by correlation id (the unknown
    ones left out)."""
    return {row.correlation_id: row for row in conn.execute(_sql("latest_result"), {"correlation_ids": correlation_ids})}


# The signal statement's own columns, and the signal's fact number (which seal holds it is
# `ackstore prove`'s to say).
SHOWN = ("shown_state", "shown_status", "shown_body", "shown_headers", "seq")


def show(conn: Connection, correlation_id: str) -> dict[str, Any] | None:
    """Everything ``show`` prints of a signal, read in the caller's one transaction: its row with
    its attempts, acks, hand-outs, where it stands (``state``: the SQL function signal_state), the
    current attempt's answer (``result``: None while undecided) and its ``timeline``; None for an
    unknown correlation id. The transaction must be new: its parts are read in one snapshot."""
    conn.execute(_sql("snapshot"))
    row = conn.execute(_sql("signal"), {"correlation_id": correlation_id}).mappings().first()
    if row is None:
        return None
    shown = {k: _jsonable(v) for k, v in row.items() if k not in SHOWN}
    shown["acks"] = [dict(a) for a in conn.execute(_sql("acks_of"), {"signal_id": row["id"]}).mappings()]
    shown["attempts"] = _attempts(conn, row["id"])
    shown["deliveries"] = handouts.handouts_of(conn, row["id"])
    shown["state"] = row["shown_state"]
    shown["result"] = None if row["shown_status"] is None else {
        "status": row["shown_status"], "body": row["shown_body"], "headers": row["shown_headers"]}
    shown["timeline"] = timeline(conn, row["id"])
    return shown


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


def _jsonable(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") and value is not None else value
