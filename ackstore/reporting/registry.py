"""Every report, once: its name (as the CLI spells it; ackstore.ledger.reports names its query the
same, with ``_`` for ``-``), what it says it is, how it reads the ledger (ackstore.ledger.reports), which options it
takes, its columns on each surface, its title, and how the terminal prints it. ``REPORTS`` is what
``ackstore report`` offers; the CLI's choices and help, ``--json``, the demo and the Ledger page
all read them here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from rich.console import Console
from sqlalchemy import Connection

from ackstore.ledger import archive_lookups, reports
from ackstore.ledger.reports import Window
from ackstore.ledger.store import AckStore
from ackstore.reporting import terminal
from ackstore.reporting.asked import DEFAULT_BUCKET, Asked, check_limit_and_source, parse_bucket, window_of
from ackstore.reporting.tables import PAGE, TERMINAL, Column, Table, on
from ackstore.reporting.shown_text import json_text, shown
from ackstore.reporting.shown_values import instant, span
from ackstore.rules import errors

Rows = list[dict[str, Any]]

# Which window a report reads.
WHOLE = "whole"  # the whole ledger: it takes no --since / --until
OPTIONAL = "optional"  # the whole ledger, or the window given
WINDOWED = "windowed"  # a window: the last 24 hours by default


@dataclass(frozen=True)
class Report:
    """One report, everything about it: what it is called and says it is, how it reads the ledger,
    which window it takes, its columns, and how the terminal prints it."""

    name: str
    summary: str  # its line in `ackstore report --help`
    title: str  # a windowed one names its window ({window}), latency its bucket ({span})
    query: Callable[[Connection, Asked], Rows]
    columns: tuple[Column, ...]
    reads: str = WHOLE  # which window: WHOLE, OPTIONAL or WINDOWED
    render: Callable[["Report", str, Rows, Console], None] = terminal.print_rows  # in the terminal
    carries: "Report | None" = None  # a report read with this one, its rows nested in each row by source
    key: str = ""  # the key this report's rows are nested under when carried

    def read(self, conn: Connection, asked: Asked) -> Rows:
        """The report's rows, with what it carries nested per source."""
        rows = self.query(conn, asked)
        if self.carries is not None:
            carried = self.carries.query(conn, asked)
            for row in rows:
                row[self.carries.key] = [c for c in carried if c["source"] == row["source"]]
        return rows

    def heading(self, asked: Asked) -> str:
        """Its title as shown: the window and bucket it was asked for filled in."""
        if self.reads != WINDOWED:
            return self.title
        window = _window(asked)
        described = f"signals received {instant(window.since)} to {instant(window.until)} UTC" + (
            f", from {shown(window.source)}" if window.source else "")
        return self.title.format(window=described, span=span(asked.bucket))

    def table(self, rows: Rows, surface: str = PAGE) -> Table:
        """Its rows in its columns on ``surface`` (the page titles them itself)."""
        return Table(on(surface, self.columns), rows)

    def asked(self, *, limit: int = 50, source: str | None = None, since: str | None = None,
              until: str | None = None, bucket: str = DEFAULT_BUCKET, now: datetime) -> Asked:
        """What a user typed for this report, checked (Ditto's 400 report:option.invalid when not)."""
        check_limit_and_source(limit, source)
        if self.reads == WHOLE and (since is not None or until is not None):
            raise errors.report_option_invalid(
                "window", since if since is not None else until, f"taken by the {self.name} report: it counts "
                f"the whole ledger (the windowed reports are {_listed(WINDOWED_NAMES)})")
        if self.reads == WHOLE or (self.reads == OPTIONAL and since is None and until is None):
            return Asked(limit, source)
        window = window_of(since, until, source, now)
        if self.reads == OPTIONAL:
            return Asked(limit, source, window)
        return Asked(limit, source, window, parse_bucket(bucket))

    def run(self, store: AckStore, *, as_json: bool, console: Console | None = None, **typed: Any) -> int:
        """``ackstore report NAME``: its rows as JSON (the stored text exact), or as the terminal's tables."""
        asked = self.asked(now=datetime.now(timezone.utc), **typed)
        # A windowed report reaching into the archive reads history; the others read open work or
        # the whole ledger, which are hot.
        with archive_lookups.answering(store.engine, _window(asked) if self.reads == WINDOWED else None) as conn:
            rows = self.read(conn, asked)
        if as_json:
            print(json_text([reports.jsonable(row) for row in rows]))
        else:
            self.render(self, self.heading(asked), rows, console or Console())
        return 0


def _settlement(conn: Connection, asked: Asked) -> Rows:
    return reports.settlement(conn, asked.source)


def _audit(conn: Connection, asked: Asked) -> Rows:
    return reports.audit(conn, asked.limit, asked.source, asked.window)


def _window(asked: Asked) -> Window:
    """The window of a windowed report, which always has one."""
    assert asked.window is not None, "a windowed report is asked for a window"
    return asked.window


def _windowed(query: Callable[[Connection, Window, int], Rows]) -> Callable[[Connection, Asked], Rows]:
    return lambda conn, asked: query(conn, _window(asked), asked.limit)


def _latency(conn: Connection, asked: Asked) -> Rows:
    return reports.latency(conn, _window(asked), asked.bucket, asked.limit)


TERMINAL_ONLY, PAGE_ONLY = (TERMINAL,), (PAGE,)

SETTLEMENT = Report(
    "settlement", "per source: requests pending a settlement decision, decided, carried out",
    "Settlement status per source and decision", _settlement,
    (Column("source", "source"), Column("status", "status"), Column("decision", "decision"),
     Column("requests", "requests", "count"), Column("oldest", "oldest", "time")))

AUDIT = Report(
    "audit", "what is received but not yet answered or settled, oldest first",
    "QoS-1 audit: received but not yet answered or settled, oldest first", _audit,
    (Column("signal_id", "signal", "count", TERMINAL_ONLY), Column("correlation_id", "correlation id"),
     Column("source", "source"), Column("source_message_id", "message", on=TERMINAL_ONLY),
     Column("attempt", "attempt", "count"), Column("stuck_at", "stuck at"), Column("detail", "detail"),
     Column("received_at", "received", "time", TERMINAL_ONLY), Column("age", "age", "seconds")),
    reads=OPTIONAL)

LATENCY = Report(
    "latency", "per source and bucket: p50/p95/p99 of received → decided → settlement → carried out",
    "Latency per source and {span} ({window})", _latency,
    (Column("bucket_start", "from", "bucket"), Column("measure", "measure", "measure"),
     Column("measured", "n", "count"), Column("signals", "of", "count"), Column("p50", "p50", "seconds"),
     Column("p95", "p95", "seconds"), Column("p99", "p99", "seconds")),
    reads=WINDOWED, render=terminal.print_per_source)

UNSETTLED = Report(
    "unsettled", "the signals not settled, after their source's watermark, with why",
    "not settled, after the watermark", _windowed(reports.unsettled),
    (Column("source", "source", on=PAGE_ONLY), Column("correlation_id", "correlation id"),
     Column("source_message_id", "message"), Column("attempt", "attempt", "count"), Column("why", "why"),
     Column("received_at", "received", "time")),
    reads=WINDOWED, key="unsettled_signals")

WATERMARKS = Report(
    "watermarks", "per source: every signal settled up to which one, and those after it that are not (why)",
    "Watermarks: per source, every signal settled up to (cumulative acknowledgement; {window})",
    _windowed(reports.watermarks),
    (Column("source", "source"), Column("signals", "signals", "count", PAGE_ONLY),
     Column("settled", "settled", "count"), Column("unsettled", "unsettled", "count"),
     Column("watermark_message_id", "up to message", absent="(none yet)"),
     Column("watermark_received_at", "received", "time")),
    reads=WINDOWED, render=terminal.print_with_carried, carries=UNSETTLED)

LATE_ACKS = Report(
    "late-acks", "acks that came after their request was decided: how late, and what they would have changed",
    "Late acks: arrived after their request was decided ({window})", _windowed(reports.late_acks),
    (Column("correlation_id", "correlation id"), Column("label", "label"), Column("status", "status", "count"),
     Column("issuer", "issuer"), Column("late_by", "late by", "seconds"), Column("answered", "answered", "count"),
     Column("would_have_answered", "if in time", "count"), Column("changes_outcome", "changed")),
    reads=WINDOWED)

LABELS = Report(
    "labels", "per label and issuer: 2xx / weak / 4xx / 408 / 5xx, and the p95 time to ack",
    "Labels: how each requested label was answered ({window})", _windowed(reports.labels),
    (Column("label", "label"), Column("issuer", "issuer"), Column("answered", "n", "count"),
     Column("ok", "2xx", "count"), Column("weak", "weak", "count"), Column("client_errors", "4xx", "count"),
     Column("timeouts", "408", "count"), Column("server_errors", "5xx", "count"),
     Column("p95_seconds", "p95 to ack", "seconds")),
    reads=WINDOWED)

DEAD_LETTERS = Report(
    "dead-letters", "the messages settled as dead-letter (their broker will not redeliver them), and why",
    "Dead letters: settled as dead-letter, their attempts used up ({window})", _windowed(reports.dead_letters),
    (Column("correlation_id", "correlation id"), Column("source", "source"),
     Column("source_message_id", "message", on=PAGE_ONLY), Column("attempt", "attempts", "count"),
     Column("status", "answered", "count"), Column("cause", "cause", on=PAGE_ONLY),
     Column("ack_statuses", "labels", "statuses"), Column("carried_out_at", "carried out", "time", absent="(not yet)")),
    reads=WINDOWED)

REPORTS: dict[str, Report] = {report.name: report for report in
                              (SETTLEMENT, AUDIT, LATENCY, WATERMARKS, LATE_ACKS, LABELS, DEAD_LETTERS)}
WINDOWED_NAMES = tuple(name for name, report in REPORTS.items() if report.reads == WINDOWED)


def _listed(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else "".join(names)


def described() -> str:
    """The reports as ``ackstore report --help`` lists them."""
    lines = [f"{name:<12} {report.summary}" for name, report in REPORTS.items()]
    optional = [name for name, report in REPORTS.items() if report.reads == OPTIONAL]
    return "\n".join(lines) + (
        f"\n\n{_listed(WINDOWED_NAMES)} read the signals received in a window (--since,\n--until; the last 24 hours "
        f"by default); {_listed(tuple(optional))} reads all unless a window is given.\n")
