"""``ackstore report``: the SQL reports as readable tables (rich), or JSON for machines."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
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


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S %Z")
    return str(value)
