"""``ackstore report``: the SQL reports as readable tables (rich), or JSON for machines."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from ackstore.ledger import reports
from ackstore.ledger.store import AckStore

TITLES = {
    "settlement": "Settlement status per source (one row per source, status and decision)",
    "audit": "QoS-1 audit: received but not yet answered or settled, oldest first",
}


def run_report(store: AckStore, name: str, *, as_json: bool, limit: int, source: str | None) -> int:
    with store.engine.connect() as conn:
        if name == "settlement":
            rows, columns = reports.settlement_status(conn, source), reports.SETTLEMENT_COLUMNS
        else:
            rows, columns = reports.qos1_audit(conn, limit, source), reports.AUDIT_COLUMNS
    if as_json:
        print(json.dumps([reports.jsonable(row) for row in rows], indent=2, ensure_ascii=False))
    else:
        render(TITLES[name], columns, rows)
    return 0


def render(title: str, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(column.replace("_", " "), overflow="fold",
                         justify="right" if column in ("requests", "attempt", "signal_id", "age") else "left")
    for row in rows:
        table.add_row(*(_cell(row[column]) for column in columns))
    console = Console()
    console.print(table)
    if not rows:
        console.print("(nothing)")


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


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S %Z")
    return str(value)
