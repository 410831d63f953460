"""``ackstore connection metrics|logs ID``: a connection's counts for the last minute, hour and
day, and its recent failures, newest first — Ditto's ``/connections/{id}/metrics`` and ``…/logs``
read from the ledger (ackstore.ledger.connection_log), as JSON or as the terminal's tables."""

from __future__ import annotations

from rich.console import Console
from sqlalchemy import Engine

from ackstore.ledger import connection_log, reports
from ackstore.reporting.tables import Column, Table
from ackstore.reporting.terminal import print_table
from ackstore.reporting.shown_text import json_text, shown
from ackstore.rules import errors

MAX_LOGS = 1000  # what the ledger keeps of a connection's log (log_connection_event)
METRIC_COLUMNS = (Column("measure", "measure"), Column("last_minute", "last minute", "count"),
                  Column("last_hour", "last hour", "count"), Column("last_day", "last day", "count"))
LOG_COLUMNS = (Column("happened_at", "when", "time"), Column("kind", "kind"),
               Column("message_id", "message"), Column("detail", "detail"))


def print_metrics(engine: Engine, connection: str, *, as_json: bool, console: Console | None = None) -> int:
    with engine.connect() as conn:
        counts = connection_log.metrics(conn, connection)
    if as_json:
        print(json_text({"connectionId": connection, **counts}))
        return 0
    measures = list(counts[connection_log.SPANS[0]])
    rows = [{"measure": measure, **{span: counts[span][measure] for span in connection_log.SPANS}}
            for measure in measures]
    print_table(Table(METRIC_COLUMNS, rows, f"Connection {shown(connection)}: the last minute, hour and day"),
                console or Console())
    return 0


def print_logs(engine: Engine, connection: str, limit: int, *, as_json: bool, console: Console | None = None) -> int:
    if not 1 <= limit <= MAX_LOGS:
        raise errors.report_option_invalid("limit", limit, f"a number of entries from 1 to {MAX_LOGS}")
    with engine.connect() as conn:
        entries = connection_log.logs(conn, connection, limit)
    if as_json:
        print(json_text({"connectionId": connection, "logs": [reports.jsonable(entry) for entry in entries]}))
        return 0
    print_table(Table(LOG_COLUMNS, entries, f"Connection {shown(connection)}: what its connector could not do, "
                                            "newest first"), console or Console())
    return 0
