"""Carrying settlement decisions out: what a connector reads and records (B.9, A.2.6).

The settle step writes one decision per attempt and ``NOTIFY ackstore_settlements, '<source>'``.
The connector of that source listens (:func:`listen`), reads the decisions not carried out yet
(:func:`undone`), records that it carries them out, then settles the deliveries on its broker.
"""

from __future__ import annotations

import select
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import psycopg2
from sqlalchemy import Connection, Engine

from ackstore.ledger.array_literals import int_array
from ackstore.ledger.named_sql import ledger_statement

NOTIFY_CHANNEL = "ackstore_settlements"  # the settle step's NOTIFY channel; the payload is the source


@dataclass(frozen=True)
class Undone:
    """A decision not carried out yet."""

    signal_id: int
    attempt: int
    decision: str
    held_for_decision: bool  # its message was held until now (it requested acks)
    wants_reply: bool  # response-required, with a reply-to to publish the result to


@dataclass(frozen=True)
class Reply:
    """A decided result and where to publish it."""

    signal_id: int
    correlation_id: str
    thing_id: str
    channel: str
    topic: str
    path: str
    reply_to: str
    status: int
    body: Any
    cause: str
    ack_statuses: dict[str, int]


def undone(conn: Connection, source: str) -> list[Undone]:
    """Every decision of ``source`` not carried out yet (bounded by pending work, not history)."""
    rows = conn.execute(ledger_statement("settlements", "undone"), {"source": source}).mappings()
    return [Undone(**row) for row in rows]


def replies(conn: Connection, decisions: Sequence[Undone]) -> list[Reply]:
    """The results to publish for ``decisions`` (those that want a reply)."""
    wanted = [d for d in decisions if d.wants_reply]
    if not wanted:
        return []
    params = {"signal_ids": int_array(d.signal_id for d in wanted), "attempts": int_array(d.attempt for d in wanted)}
    return [Reply(**row) for row in conn.execute(ledger_statement("settlements", "replies"), params).mappings()]


def record_carried_out(conn: Connection, decisions: Sequence[tuple[int, int]], *, held: bool,
                       carried_out_as: str | None = None) -> set[int]:
    """Record that (signal, attempt) decisions are carried out now; the signals recorded.

    ``held``: this connector holds the deliveries, so every one is returned, even one recorded
    before (a redelivered copy of a message settled again; the first record's time is kept).
    Otherwise only the first recorder gets it. ``carried_out_as``: the settlement the transport
    performed instead of these decisions (decisions #99); None: as decided.
    """
    if not decisions:
        return set()
    params = {"signal_ids": int_array(d[0] for d in decisions), "attempts": int_array(d[1] for d in decisions),
              "held": held, "carried_out_as": carried_out_as}
    return set(conn.execute(ledger_statement("settlements", "record"), params).scalars())


def record_latest(conn: Connection, signal_ids: Iterable[int]) -> list[str]:
    """Record that the newest decision of each signal is carried out (unless it was recorded); the
    decisions this recorded, one per signal, as the write function returns them (a copy of a
    message whose decision was carried out before — or another connector recorded meanwhile —
    records nothing)."""
    ids = list(signal_ids)
    if not ids:
        return []
    return list(conn.execute(ledger_statement("settlements", "record_latest"), {"signal_ids": int_array(ids)}).scalars(
        "decision"))


class Listener:
    """``LISTEN`` on a connection of its own — by default ``ackstore_settlements``; :meth:`wait`
    tells whether ``source`` was notified (None: anything on the channel; the caller polls as
    well, in case a notification is lost while it was not connected)."""

    def __init__(self, engine: Engine, source: str | None, channel: str = NOTIFY_CHANNEL) -> None:
        self.engine = engine
        self.source = source
        self.channel = channel
        self._conn = self._listen()

    def _listen(self) -> Any:
        raw = self.engine.raw_connection()
        conn = raw.driver_connection
        raw.detach()  # this connection stays outside the pool, listening
        conn.set_session(autocommit=True)
        with conn.cursor() as cursor:
            cursor.execute(f"LISTEN {self.channel}")  # a channel name cannot be a bind parameter: one of ours
        return conn

    def wait(self, timeout_s: float) -> bool:
        try:
            if not self._conn.notifies and select.select([self._conn], [], [], max(timeout_s, 0))[0] == []:
                return False
            self._conn.poll()
        except psycopg2.Error:  # the database went away: listen again; the caller reads now
            self._reconnect()
            return True
        notified = any(self.source is None or n.payload == self.source for n in self._conn.notifies)
        self._conn.notifies.clear()
        return notified

    def _reconnect(self) -> None:
        try:
            self._conn.close()
        except psycopg2.Error:
            pass
        try:
            self._conn = self._listen()
        except Exception:  # noqa: BLE001 — still down: the next wait tries again
            pass

    def close(self) -> None:
        self._conn.close()
