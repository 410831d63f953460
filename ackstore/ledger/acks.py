"""Storing what subscribers answer: acks with their disposition (A.2.5, A.2.8) and the first
live response of a live signal (B.7). Statements: ``sql/acks.sql``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from ackstore.ledger.named_sql import ledger_statement
from ackstore.rules import jsontext
from ackstore.rules.acks import ABSENT, Ack, disposition_on_arrival


def _sql(name: str) -> Any:
    return ledger_statement("acks", name)


def _json(value: Any) -> str | None:
    """JSON text for a jsonb parameter: SQL NULL for an absent value (JSON ``null`` stays JSON)."""
    return None if value is ABSENT else jsontext.dumps(value)


def lock_request(conn: Connection, correlation_id: str) -> Any:
    """The request an ack is for (its current attempt), share-locked so that deciding it waits;
    None for an unknown correlation id."""
    return conn.execute(_sql("current_request"), {"correlation_id": correlation_id}).first()


def is_decided(conn: Connection, signal_id: int, attempt: int) -> bool:
    return conn.execute(_sql("is_decided"), {"signal_id": signal_id, "attempt": attempt}).scalar_one()


def store_ack(conn: Connection, target: Any, ack: Ack, issuer: str, decided: bool, invalid: str | None = None) -> None:
    """Store one valid ack: counted if it is the first for a requested label of an undecided
    request; otherwise kept as late, unrequested or duplicate. A live response that does not
    answer its command is kept as ``invalid``, with why."""
    row = {
        "signal_id": target.id,
        "attempt": target.attempt,
        "label": ack.label,
        "status": ack.status,
        "payload": _json(ack.payload),
        "headers": jsontext.dumps(dict(ack.headers)),
        "issuer": issuer,
        "reason": invalid,
    }
    disposition = disposition_on_arrival(
        decided=decided, requested=ack.label in target.requested_acks, invalid=invalid is not None)
    conn.execute(_sql("insert_ack"), {**row, "disposition": disposition.value})  # a counted one may stay a duplicate


def store_live_response(conn: Connection, signal_id: int) -> None:
    """The first live response is the signal's response: the requester's plain answer when it
    asked for none of the labels (B.7). It is what the live-response ack counted for the signal
    carries, stored just before."""
    conn.execute(_sql("insert_live_response"), {"signal_id": signal_id})
