"""The SQL reports (docs/reports.md): settlement and audit are views; the windowed ones
(latency, watermarks, late acks, labels) functions of a window — all in ``sql/objects/reports/``,
read by the statements of ``sql/reports.sql``. Every reader of a report (the CLI, the Ledger page)
reads it here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ackstore.ledger.named_sql import ledger_statement
from ackstore.rules.acks import Ack
from ackstore.rules.aggregation import Request, decide_with_late_ack


@dataclass(frozen=True)
class Window:
    """The signals received in [since, until), from ``source`` or any: what a windowed report reads
    (and the audit may), and what archive_lookups gathers. The one window type: every reader asks with it."""

    since: datetime
    until: datetime
    source: str | None = None

    def params(self, limit: int) -> dict[str, Any]:
        return {"since": self.since, "until": self.until, "source": self.source, "limit": limit}


def settlement(conn: Connection, source: str | None = None) -> list[dict[str, Any]]:
    """Per source: requests pending a settlement decision, decided, carried out — by decision."""
    return [dict(row) for row in conn.execute(ledger_statement("reports", "settlement"), {"source": source}).mappings()]


def audit(conn: Connection, limit: int = 50, source: str | None = None,
          window: Window | None = None) -> list[dict[str, Any]]:
    """Signals received (in ``window``, when given) but not yet answered or settled, oldest
    first, with where they are stuck."""
    since, until = (window.since, window.until) if window is not None else (None, None)
    params = {"source": source, "limit": limit, "since": since, "until": until}
    return [dict(row) for row in conn.execute(ledger_statement("reports", "audit"), params).mappings()]


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """A report row for JSON: timestamps in ISO 8601, ages in seconds, nested rows likewise."""
    return {key: _json_value(value) for key, value in row.items()}


def _json_value(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, list):
        return [jsonable(item) if isinstance(item, dict) else _json_value(item) for item in value]
    return value.isoformat() if hasattr(value, "isoformat") else value


# --- the windowed reports ------------------------------------------------------------------------

# What a late-acks row holds (the rest of what its statement reads is the decision's input).
LATE_ACK_COLUMNS = ("signal_id", "correlation_id", "source", "attempt", "label", "status", "issuer", "received_at",
                    "late_by", "answered", "would_have_answered", "changes_outcome")
# What the late-acks statement reads for the counterfactual decision, not shown.
_DECISION_INPUTS = ("weak", "cause", "api", "requested_acks", "response_required", "timeout_ms", "counted")


def _rows(conn: Connection, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    conn.execute(ledger_statement("reports", "settings"))
    return [dict(row) for row in conn.execute(ledger_statement("reports", name), params).mappings()]


def latency(conn: Connection, window: Window, bucket: timedelta, limit: int) -> list[dict[str, Any]]:
    """Per source and bucket of received time: p50/p95/p99 seconds of received → decided, decided →
    settlement decided, decided → carried out, received → carried out."""
    return _rows(conn, "latency", {**window.params(limit), "bucket": bucket})


def watermarks(conn: Connection, window: Window, limit: int) -> list[dict[str, Any]]:
    """Per source: the last signal up to which every signal is settled, and how many are not."""
    return _rows(conn, "watermarks", window.params(limit))


def unsettled(conn: Connection, window: Window, limit: int) -> list[dict[str, Any]]:
    """The signals not settled, by source in received order, with why."""
    return _rows(conn, "unsettled", window.params(limit))


def late_acks(conn: Connection, window: Window, limit: int) -> list[dict[str, Any]]:
    """Acks that came after their attempt was decided: how late, what was answered, and what the
    attempt would have answered had the ack come in time (the aggregation rule's own decision)."""
    rows = _rows(conn, "late_acks", window.params(limit))
    for row in rows:
        would = _would_have_answered(row)
        row["would_have_answered"] = would
        row["changes_outcome"] = would is not None and would != row["answered"]
        for name in _DECISION_INPUTS:
            del row[name]
    return rows


def dead_letters(conn: Connection, window: Window, limit: int) -> list[dict[str, Any]]:
    """The signals settled as dead-letter (their attempts used up), with what their last attempt
    was answered and why, and when it was carried out (None: not yet)."""
    return _rows(conn, "dead_letters", window.params(limit))


def labels(conn: Connection, window: Window, limit: int) -> list[dict[str, Any]]:
    """Per label and issuer: how the requested label was answered (2xx, weak, 4xx, 408, 5xx) and
    the p95 seconds from the attempt's opening to its ack."""
    return _rows(conn, "labels", window.params(limit))


def _would_have_answered(row: dict[str, Any]) -> int | None:
    """The status the late ack's attempt would have been answered with, had it come in time; None
    for a failed twin command (its answer is the failure, whatever the acks: A.2.7)."""
    if row["cause"] == "error":
        return None
    request = Request(correlation_id=row["correlation_id"], requested_acks=tuple(row["requested_acks"]),
                      response_required=row["response_required"], timeout_ms=row["timeout_ms"], api=row["api"])
    counted = [Ack(label=ack["label"], status=ack["status"], weak=ack["weak"]) for ack in row["counted"]]
    late = Ack(label=row["label"], status=row["status"], weak=row["weak"])
    return decide_with_late_ack(request, counted, late).status
