"""A hand-built ledger: signals, their attempts, acks, decisions and settlements, each fact written
with its own time (seconds after an origin), so that a test computes what the reports should say
from the seed itself. SEED is the windowed reports' ledger; ``ledger`` makes three signals of any
text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from sqlalchemy import Engine, text

from ackstore.ledger.reports import Window
from ackstore.rules.settlement import LOCAL_SOURCES

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class Attempt:
    requested: list[str]
    opened: float
    deadline: float
    decided: float | None = None
    status: int | None = None
    cause: str = "acks"
    ack_statuses: dict[str, int] = field(default_factory=dict)
    settlement: tuple[str, float, float | None] | None = None  # decision, decided, carried out
    acks: list[tuple[str, int, str, float, str, bool]] = field(default_factory=list)  # label, status, issuer, at, disposition, weak


@dataclass
class Signal:
    name: str
    source: str
    received: float
    attempts: list[Attempt]
    message_id: str | None = None  # the source's message id: its name when None

    @property
    def api(self) -> str:
        return "http" if self.source == "api" else "connectivity"


def ack(label: str, status: int, issuer: str, seconds: float, disposition: str = "counted", weak: bool = False):
    return (label, status, issuer, seconds, disposition, weak)


SEED = [
    Signal("a1", "plant-a", 0, [Attempt(["app:done"], 0, 60, 10, 200, "acks", {"app:done": 200}, ("ack", 70, 71),
                                        [ack("app:done", 200, "app", 4)])]),
    Signal("p1", "api", 10, [Attempt([], 10, 70, 20, 202, "accepted")]),
    Signal("b1", "plant-b", 30, [Attempt(["app:done"], 30, 90, 40, 200, "acks", {"app:done": 200}, ("ack", 50, 52),
                                         [ack("app:done", 200, "filtering", 31, weak=True)])]),
    Signal("a2", "plant-a", 60, [
        Attempt(["app:done"], 60, 80, 90, 408, "deadline", {"app:done": 408}, ("redeliver", 100, 101),
                [ack("app:done", 200, "app", 95, "late")]),
        Attempt(["app:done"], 200, 260, 210, 200, "acks", {"app:done": 200}, ("ack", 220, None),
                [ack("app:done", 200, "app", 205)]),
    ]),
    Signal("a3", "plant-a", 120, [Attempt(["app:done"], 120, 180)]),
    Signal("b2", "plant-b", 150, [Attempt(["app:done"], 150, 210, 160, 500, "acks", {"app:done": 500},
                                          ("dead-letter", 170, 171), [ack("app:done", 500, "app", 155)])]),
    Signal("a4", "plant-a", 3700, [Attempt(["app:done", "app:more"], 3700, 3760, 3710, 424, "acks",
                                           {"app:done": 200, "app:more": 503}, ("reject", 3715, 3720),
                                           [ack("app:done", 200, "app", 3702), ack("app:more", 503, "other", 3703),
                                            ack("app:more", 200, "other", 3800, "late")])]),
    Signal("p2", "api", 5000, [Attempt([], 5000, 5060, 5001, 202, "accepted")]),
]
ALL = Window(at(-1), at(6000))


def seed(engine: Engine, origin: datetime = T0, signals: list[Signal] | None = None) -> None:
    """Write SEED into the ledger, every fact with its own time (seconds after ``origin``)."""

    def at(seconds: float) -> datetime:
        return origin + timedelta(seconds=seconds)

    with engine.begin() as conn:
        for signal in SEED if signals is None else signals:
            if signal.source not in LOCAL_SOURCES:  # a connection's first message claims it (act_for_source),
                # whatever the order signals are listed in: its log keeps no time before the claim (decisions #126)
                conn.execute(text("INSERT INTO connections (id, owner_login, claimed_at) VALUES (:c, session_user, :at) "
                                  "ON CONFLICT (id) DO UPDATE SET claimed_at = LEAST(connections.claimed_at, "
                                  "EXCLUDED.claimed_at)"), {"c": signal.source, "at": at(signal.received)})
            first = signal.attempts[0]
            signal_id = conn.execute(text(
                "INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action, thing_id, "
                "topic, path, value, headers, requested_acks, response_required, timeout_ms, received_at, deadline_at) "
                "VALUES (:source, :message, :name, :api, 'twin', 'twin-command', 'modify', 'org.acme:t', "
                "'org.acme/t/things/twin/commands/modify', '/attributes/n', '1', '{}', :requested, :required, "
                ":timeout, :received, :deadline) RETURNING id"),
                {"source": signal.source, "name": signal.name, "message": signal.message_id or signal.name, "api": signal.api, "requested": first.requested,
                 "required": bool(first.requested), "timeout": int((first.deadline - first.opened) * 1000),
                 "received": at(signal.received), "deadline": at(first.deadline)}).scalar_one()
            for number, attempt in enumerate(signal.attempts, 1):
                if number > 1:
                    conn.execute(text("INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at) "
                                      "VALUES (:s, :n, :r, :o, :d)"),
                                 {"s": signal_id, "n": number, "r": attempt.requested, "o": at(attempt.opened),
                                  "d": at(attempt.deadline)})
                for label, status, issuer, seconds, disposition, weak in attempt.acks:
                    conn.execute(text("INSERT INTO acks (signal_id, attempt, label, status, headers, issuer, weak, "
                                      "received_at, disposition) VALUES (:s, :n, :l, :st, '{}', :i, :w, :at, :d)"),
                                 {"s": signal_id, "n": number, "l": label, "st": status, "i": issuer, "w": weak,
                                  "at": at(seconds), "d": disposition})
                if attempt.decided is not None:
                    conn.execute(text("INSERT INTO request_results (signal_id, attempt, status, headers, cause, "
                                      "ack_statuses, decided_at, batch_id) VALUES (:s, :n, :st, '{}', :c, :a, :at, 1)"),
                                 {"s": signal_id, "n": number, "st": attempt.status, "c": attempt.cause,
                                  "a": json.dumps(attempt.ack_statuses), "at": at(attempt.decided)})
                if attempt.settlement is not None:
                    decision, decided, carried = attempt.settlement
                    conn.execute(text("INSERT INTO settlements (signal_id, attempt, decision, decided_at, carried_out_at) "
                                      "VALUES (:s, :n, :d, :at, :c)"),
                                 {"s": signal_id, "n": number, "d": decision, "at": at(decided),
                                  "c": None if carried is None else at(carried)})


STANDINGS = {  # how a generated signal's only attempt ends
    "undecided": (None, None),
    "settlement undecided": (200, None),
    "acked": (200, ("ack", 2, 3)),
    "rejected": (400, ("reject", 2, 3)),
    "not carried out": (200, ("ack", 2, None)),
    "redeliver": (503, ("redeliver", 2, 3)),
    "dead-letter": (503, ("dead-letter", 2, 3)),
}


def ledger(source: str, settled: str, undecided: str, late: str, label: str, issuer: str) -> list[Signal]:
    """Three signals from ``source``: one settled (the watermark), one undecided, one answered 408
    at its deadline and redelivered, with a late ack from ``issuer`` (late-acks, labels)."""
    return [
        Signal(settled, source, 0, [Attempt([label], 0, 60, 10, 200, "acks", {label: 200}, ("ack", 20, 21),
                                            [ack(label, 200, "app", 5)])]),
        Signal(undecided, source, 30, [Attempt([label], 30, 3000)]),
        Signal(late, source, 60, [Attempt([label], 60, 70, 80, 408, "deadline", {label: 408}, ("redeliver", 90, None),
                                          [ack(label, 200, issuer, 85, "late")])]),
    ]


def seeded(engine: Engine, origin: datetime, signals: list[Signal]) -> None:
    """``signals`` in the ledger, each undecided attempt queued for the sweep (as ingestion queues it)."""
    seed(engine, origin, signals)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO queue_decide (signal_id, attempt) SELECT a.signal_id, a.attempt FROM attempts a "
                          "WHERE NOT EXISTS (SELECT 1 FROM request_results r "
                          "WHERE r.signal_id = a.signal_id AND r.attempt = a.attempt)"))
