"""``ackstore report``: the SQL reports as readable tables (rich), or JSON for machines.

Tables stay whole at 80 columns and when piped: a header is never folded (its column is at least
as wide as it); a value may fold within its column; and a report whose headers alone do not fit
is printed one record per block instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any, Callable, Sequence

from ackstore.ledger import reports
from ackstore.ledger.reports import Window
from ackstore.ledger.store import AckStore
from ackstore.rules import errors
from ackstore.rules.durations import parse_duration_ms

WINDOWED = ("latency", "watermarks", "late-acks", "labels")
REPORTS = ("settlement", "audit", *WINDOWED)
DEFAULT_WINDOW = timedelta(hours=24)
DEFAULT_BUCKET = "1h"
MAX_LIMIT = 1_000_000_000


@dataclass(frozen=True)
class Column:
    """A report column as a table shows it: its row key, its header, and how a value is shown."""

    key: str
    header: str
    kind: str = "text"  # text | count | seconds | time | bucket

    @property
    def numeric(self) -> bool:
        return self.kind in ("count", "seconds")


def _columns(*specs: tuple[str, ...]) -> tuple[Column, ...]:
    return tuple(Column(*spec) for spec in specs)


COLUMNS: dict[str, tuple[Column, ...]] = {
    "settlement": _columns(("source", "source"), ("status", "status"), ("decision", "decision"),
                           ("requests", "requests", "count"), ("oldest", "oldest", "time")),
    "audit": _columns(("signal_id", "signal", "count"), ("correlation_id", "correlation id"), ("source", "source"),
                      ("source_message_id", "message"), ("attempt", "attempt", "count"), ("stuck_at", "stuck at"),
                      ("detail", "detail"), ("received_at", "received", "time"), ("age", "age", "seconds")),
    "latency": _columns(("bucket_start", "from", "bucket"), ("measure", "measure"), ("measured", "n", "count"),
                        ("signals", "of", "count"), ("p50", "p50", "seconds"), ("p95", "p95", "seconds"),
                        ("p99", "p99", "seconds")),
    "watermarks": _columns(("source", "source"), ("settled", "settled", "count"),
                           ("unsettled", "unsettled", "count"), ("watermark_message_id", "up to message"),
                           ("watermark_received_at", "received", "time")),
    "unsettled": _columns(("correlation_id", "correlation id"), ("source_message_id", "message"),
                          ("attempt", "attempt", "count"), ("why", "why"), ("received_at", "received", "time")),
    "late-acks": _columns(("correlation_id", "correlation id"), ("label", "label"), ("status", "status", "count"),
                          ("issuer", "issuer"), ("late_by", "late by", "seconds"),
                          ("answered", "answered", "count"), ("would_have_answered", "if in time", "count"),
                          ("changes_outcome", "changed")),
    "labels": _columns(("label", "label"), ("issuer", "issuer"), ("answered", "n", "count"), ("ok", "2xx", "count"),
                       ("weak", "weak", "count"), ("client_errors", "4xx", "count"), ("timeouts", "408", "count"),
                       ("server_errors", "5xx", "count"), ("p95_seconds", "p95 to ack", "seconds")),
}

MEASURES = {
    "received_to_decided": "received → decided",
    "decided_to_settlement_decided": "decided → settlement",
    "decided_to_carried_out": "decided → carried out",
    "received_to_carried_out": "received → carried out",
}


def run_report(store: AckStore, name: str, *, as_json: bool, limit: int = 50, source: str | None = None,
               since: str | None = None, until: str | None = None, bucket: str = DEFAULT_BUCKET) -> int:
    """Print report ``name``: a table (or one block per record, when the table would not fit), or JSON."""
    if not 1 <= limit <= MAX_LIMIT:
        raise errors.report_option_invalid("--limit", limit, f"an integer from 1 to {MAX_LIMIT:,}")
    if source is not None and "\x00" in source:  # no stored source holds one; PostgreSQL refuses it as text
        raise errors.report_option_invalid("--source", source.replace("\x00", "\\0"), "text without NUL characters")
    now = datetime.now(timezone.utc)
    with store.engine.connect() as conn:
        if name in WINDOWED:
            window = window_of(since, until, source, now)
            rows, title = _windowed(conn, name, window, limit, parse_bucket(bucket))
        elif name == "settlement":
            if since is not None or until is not None:
                raise errors.report_option_invalid(
                    "window", since if since is not None else until, "taken by the settlement report: it counts "
                    "the whole ledger (the windowed reports are latency, watermarks, late-acks and labels)")
            rows, title = reports.settlement_status(conn, source), "Settlement status per source and decision"
        else:
            rows = reports.qos1_audit(conn, limit, source, *_audit_window(since, until, now))
            title = "QoS-1 audit: received but not yet answered or settled, oldest first"
    if as_json:
        print(json.dumps([reports.jsonable(row) for row in rows], indent=2, ensure_ascii=False))
    elif name == "watermarks":
        render_watermarks(title, rows)
    elif name == "latency":
        render_latency(title, rows)
    else:
        render(title, COLUMNS[name], rows)
    return 0


def _windowed(conn: Any, name: str, window: Window, limit: int, bucket: timedelta) -> tuple[list[dict[str, Any]], str]:
    shown = f"signals received {instant(window.since)} to {instant(window.until)} UTC" + (
        f", from {window.source}" if window.source else "")
    if name == "latency":
        return reports.latency(conn, window, bucket, limit), f"Latency per source and {_span(bucket)} ({shown})"
    if name == "watermarks":
        marks = reports.watermarks(conn, window, limit)
        pending = reports.unsettled(conn, window, limit)
        for mark in marks:
            mark["unsettled_signals"] = [row for row in pending if row["source"] == mark["source"]]
        return marks, f"Watermarks: per source, every signal settled up to (cumulative acknowledgement; {shown})"
    if name == "late-acks":
        return reports.late_acks(conn, window, limit), f"Late acks: arrived after their request was decided ({shown})"
    return reports.labels(conn, window, limit), f"Labels: how each requested label was answered ({shown})"


# --- what the user typed -------------------------------------------------------------------------

_AGO = re.compile(r"[0-9]+(ms|mo|s|m|h|d|w|y)")


def window_of(since: str | None, until: str | None, source: str | None, now: datetime) -> Window:
    """The window of --since/--until: each a time, 'now', or a duration before now; by default the
    last 24 hours up to now."""
    end = parse_instant(until, now, "--until") if until is not None else now
    start = parse_instant(since, now, "--since") if since is not None else end - DEFAULT_WINDOW
    if start >= end:
        raise errors.report_option_invalid("window", f"{instant(start)} to {instant(end)}",
                                           "a window whose --since comes before its --until")
    return Window(start, end, source)


def parse_instant(text: str, now: datetime, option: str) -> datetime:
    """A time the user typed: ISO 8601 (a date, or a time with or without its offset: UTC when
    none), 'now', or a duration before now such as 90m, 24h or 7d."""
    value = text.strip()
    if value == "now":
        return now
    try:
        if _AGO.fullmatch(value):
            return now - timedelta(milliseconds=parse_duration_ms(value))
        parsed = datetime.fromisoformat(value) if "T" in value or " " in value else None
        if parsed is None:
            day = date.fromisoformat(value)
            parsed = datetime(day.year, day.month, day.day)
        return parsed.astimezone(timezone.utc) if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError, errors.DittoError):  # OverflowError: before year 1 in UTC
        raise errors.report_option_invalid(option, text, "a time, 'now' or a duration before now") from None


def parse_bucket(text: str) -> timedelta:
    """A latency bucket: a duration of a millisecond at least (months and years are not fixed spans:
    a bucket is at most 4 weeks)."""
    try:
        bucket = timedelta(milliseconds=parse_duration_ms(text.strip())) if _AGO.fullmatch(text.strip()) else None
    except (errors.DittoError, OverflowError):
        bucket = None
    if bucket is None or not timedelta(0) < bucket <= timedelta(weeks=4) or text.strip().endswith(("mo", "y")):
        raise errors.report_option_invalid("--bucket", text, "a duration from 1ms to 4w, such as 15m, 1h or 1d")
    return bucket


def _audit_window(since: str | None, until: str | None, now: datetime) -> tuple[datetime | None, datetime | None]:
    """The audit is whole unless a window is given: then it keeps the signals received in it."""
    if since is None and until is None:
        return None, None
    window = window_of(since, until, None, now)
    return window.since, window.until


# --- tables ----------------------------------------------------------------------------------------

def render(title: str, columns: Sequence[Column], rows: list[dict[str, Any]], *, console: Any = None) -> None:
    """A table whose headers stay whole, or one block per record when even the headers do not fit."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    cells = [[_shown(column, row[column.key]) for column in columns] for row in rows]
    widths = _widths(columns, cells, console.width)
    if widths is None:
        return _render_blocks(console, title, columns, cells)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)
    for column, width in zip(columns, widths):
        table.add_column(column.header, width=width, overflow="fold", no_wrap=column.numeric,
                         justify="right" if column.numeric else "left")
    for row in cells:
        table.add_row(*row)
    console.print(table)
    if not rows:
        console.print("(nothing)")


GAP = 2  # the space between two columns of such a table


def _widths(columns: Sequence[Column], cells: list[list[str]], room: int) -> list[int] | None:
    """Each column's width so the table fits ``room``: numbers whole, every header whole, the
    widest text columns folded first; None when even that does not fit."""
    from rich.cells import cell_len

    natural = [max([cell_len(column.header), *(cell_len(row[i]) for row in cells)]) for i, column in enumerate(columns)]
    least = [natural[i] if column.numeric else cell_len(column.header) for i, column in enumerate(columns)]
    room -= GAP * (len(columns) - 1)
    if sum(least) > room:
        return None
    widths = list(natural)
    while sum(widths) > room:  # fold the widest text column by one, down to its header
        widest = max((i for i in range(len(widths)) if widths[i] > least[i]), key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def _render_blocks(console: Any, title: str, columns: Sequence[Column], cells: list[list[str]]) -> None:
    from rich.table import Table

    console.print(title)
    if not cells:
        console.print("(nothing)")
    for n, row in enumerate(cells, 1):
        block = Table.grid(padding=(0, 2))
        block.add_column(no_wrap=True)
        block.add_column(overflow="fold")
        for column, value in zip(columns, row):
            block.add_row(column.header, value)
        console.print(f"— {n} —")
        console.print(block)


def render_latency(title: str, rows: list[dict[str, Any]], *, console: Any = None) -> None:
    """One table per source: each bucket's measures in order."""
    from rich.console import Console

    console = console or Console()
    if not rows:
        console.print(title)
        console.print("(nothing)")
    for source in dict.fromkeys(row["source"] for row in rows):
        ours = [{**row, "measure": MEASURES.get(row["measure"], row["measure"])} for row in rows
                if row["source"] == source]
        render(f"{title}\nsource {source}", COLUMNS["latency"], ours, console=console)


def render_watermarks(title: str, rows: list[dict[str, Any]], *, console: Any = None) -> None:
    """The watermark per source, then each source's unsettled signals with why."""
    from rich.console import Console

    console = console or Console()
    render(title, COLUMNS["watermarks"], rows, console=console)
    for row in rows:
        if row["unsettled_signals"]:
            render(f"{row['source']}: not settled, after the watermark", COLUMNS["unsettled"],
                   row["unsettled_signals"], console=console)


def render_timeline(state: dict[str, Any], timeline: list[dict[str, Any]]) -> None:
    """A signal's checkpoints, oldest first, under a line that names the signal. Readable when
    piped or at 80 columns: every column but the detail is kept whole (an ack's label goes with
    its checkpoint), the detail wraps at words, and times show their date only when the
    checkpoints span more than one day (the title names it otherwise)."""
    from rich.console import Console
    from rich.table import Table

    result = state.get("result") or {}
    days = {row["at"].astimezone(timezone.utc).date() for row in timeline}
    shown_format = "%H:%M:%S.%f" if len(days) == 1 else "%Y-%m-%d %H:%M:%S.%f"
    title = (f"{state['correlation_id']}: {state['kind']} {state['action']} of {state['thing_id']} from "
             f"{state['source']} — {state['state']}"
             + (f", answered {result['status']}" if isinstance(result.get("status"), int) else "")
             + (f"; times on {next(iter(days))} (UTC)" if len(days) == 1 else "; times in UTC"))
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    table.add_column("at", no_wrap=True)
    table.add_column("attempt", justify="right", no_wrap=True)
    table.add_column("checkpoint", no_wrap=True)
    table.add_column("status", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold", ratio=1)
    for row in timeline:
        at = row["at"].astimezone(timezone.utc).strftime(shown_format)[:-3]
        checkpoint = f"{row['checkpoint']} {row['label']}" if row["label"] else row["checkpoint"]
        table.add_row(at, _cell(row["attempt"]), checkpoint, _cell(row["status"]), _cell(row["detail"]))
    Console().print(table)


# --- values ----------------------------------------------------------------------------------------

def _shown(column: Column, value: Any) -> str:
    formats: dict[str, Callable[[Any], str]] = {"seconds": seconds, "time": instant, "bucket": _bucket}
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return formats.get(column.kind, _cell)(value)


def seconds(value: float | timedelta) -> str:
    """A duration in at most 7 characters: 0.123s, 12.3s, 4m05s, 3h07m, 12d03h."""
    total = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if total < 10:
        return f"{total:.3f}s"
    if total < 60:
        return f"{total:.1f}s"
    whole = int(total)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def instant(value: datetime) -> str:
    """A time as every report shows it: UTC, to the second."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _bucket(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%m-%d %H:%M")


def _span(bucket: timedelta) -> str:
    return {timedelta(hours=1): "hour", timedelta(days=1): "day", timedelta(minutes=1): "minute"}.get(
        bucket, seconds(bucket))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, timedelta):
        return seconds(value)
    if isinstance(value, datetime):
        return instant(value)
    return str(value)
