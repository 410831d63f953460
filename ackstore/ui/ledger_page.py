"""The Ledger page: the QoS-1 audit inside Airflow's UI (a FastAPI app mounted by the plugin).

It reads the ledger through the Airflow connection the DAG uses (``ackstore_ledger``). At the top, a
health strip: backlog, oldest unsettled, last pass, last seal, the validation gate and the
connectors, summarised (ackstore.reporting.health) from the rows a scrape of ``ackstore metrics``
reads (ackstore.ledger.metrics.read), so the page and Prometheus say the same, and coloured ok /
warning / critical by the thresholds the alert rules are made of (ackstore.rules.thresholds). Every other number comes
from the reports of ackstore.reporting.registry, in their columns and cells: the
settlement status per source, the watermarks of the last 24 hours and what is not settled after
them, the open-work audit (oldest first), the latency per source and hour, and one signal's
timeline found by its correlation id. Stored text is shown as the terminal shows it
(shown_text.shown; Jinja escapes HTML), and long values wrap. Every route requires an authenticated Airflow user:
plugin routes are not authenticated by Airflow by default.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from ackstore.ledger.database import make_engine
from ackstore.ledger import metrics as ledger_metrics
from ackstore.ledger.database_url import LEDGER_CONNECTION, DatabaseUrl
from ackstore.ledger.reports import Window
from ackstore.ledger.store import AckStore
from ackstore.reporting.asked import DEFAULT_WINDOW, Asked
from ackstore.reporting.alert_rules import thresholds_from_environment
from ackstore.reporting.health import figures, health, status
from ackstore.reporting.registry import AUDIT, LATENCY, SETTLEMENT, UNSETTLED, WATERMARKS
from ackstore.reporting.tables import PAGE, Cell, Table, on
from ackstore.reporting.shown_text import shown, unshown
from ackstore.reporting.timeline import TIMELINE, described
from ackstore.reporting.shown_values import MEASURES, instant
from ackstore.rules.settings import Settings
from ackstore.rules.thresholds import Thresholds
from ackstore.ui.chart import latency_svg

AUDIT_ROWS = 20
CHARTED = "received_to_decided"
LONG_WORD = 20  # characters: a cell with a longer word may break it anywhere (others wrap at spaces)

_templates = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                         autoescape=select_autoescape(["html"]))
_templates.filters["time"] = instant
_templates.filters["shown"] = shown


def _layout(cell: Cell) -> str:
    """A cell's class: numbers and times whole, a word longer than LONG_WORD broken anywhere.
    Only those may break mid-word: were every cell allowed to, a table squeezed by one long value
    would break times and labels too."""
    if cell.column.numeric:
        return "n"
    if cell.column.kind in ("time", "moment"):
        return "t"
    return "long" if max(map(len, cell.text.split()), default=0) > LONG_WORD else ""


_templates.filters["layout"] = _layout


def create_app() -> FastAPI:
    """The page's app: every route behind Airflow's own dependency for an authenticated user (a
    bearer token, or the cookie Airflow's UI sets at login)."""
    from airflow.api_fastapi.core_api.security import get_user

    app = FastAPI(title="ackstore ledger", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def ledger(correlation_id: str | None = None) -> HTMLResponse:
        store = _store(_ledger_url())
        now = datetime.now(timezone.utc)
        return HTMLResponse(render(gather(store, now, correlation_id)))

    return app


def gather(store: AckStore, now: datetime, correlation_id: str | None = None,
           thresholds: Thresholds | None = None) -> dict[str, Any]:
    """What the page shows, each part read by its report: its tables in the page's columns; the
    health strip coloured by ``thresholds`` (default: those of the settings in the environment)."""
    window = Window(now - DEFAULT_WINDOW, now)
    day = Asked(window=window)
    with store.engine.connect() as conn:
        latency = LATENCY.query(conn, replace(day, limit=10_000, bucket=timedelta(hours=1)))
        page = {
            "now": now, "window": window,
            "settlement": SETTLEMENT.table(SETTLEMENT.query(conn, Asked())),
            "watermarks": WATERMARKS.table(WATERMARKS.query(conn, replace(day, limit=1_000))),
            "unsettled": UNSETTLED.table(UNSETTLED.query(conn, replace(day, limit=AUDIT_ROWS))),
            "audit": AUDIT.table(AUDIT.query(conn, Asked(limit=AUDIT_ROWS))),
        }
    reading = ledger_metrics.read(store.engine, store.settings.metric_sources)  # what a scrape reads
    page["health"] = figures(health(reading), now, thresholds or thresholds_from_environment())
    page["status"] = status(page["health"])
    sources = list(dict.fromkeys(row["source"] for row in latency))
    page["charts"] = [{"source": source, "rows": [r for r in latency if r["source"] == source]} for source in sources]
    for chart in page["charts"]:
        chart["svg"] = Markup(latency_svg(chart["rows"], window.since, window.until, CHARTED))
    page["charted"] = MEASURES[CHARTED]
    page["search"] = correlation_id
    if correlation_id:
        page["signal"] = store.show(correlation_id)
        typed = unshown(correlation_id)  # typed as a table shows it (\x1b for ESC), as the search box holds it
        if page["signal"] is None and typed != correlation_id:
            page["signal"] = store.show(typed)
        page["described"] = described(page["signal"]) if page["signal"] else ""
        page["timeline"] = Table(on(PAGE, TIMELINE), page["signal"]["timeline"] if page["signal"] else [])
    return page


def render(page: dict[str, Any]) -> str:
    return _templates.get_template("ledger.html").render(**page)


def _ledger_url() -> str:
    """The ledger's URL, from the Airflow connection ``ackstore_ledger`` (looked up per request:
    an edited connection takes effect without a restart)."""
    from airflow.models.connection import Connection

    return DatabaseUrl.from_airflow_connection(Connection.get_connection_from_secrets(LEDGER_CONNECTION)).text()


@lru_cache(maxsize=4)
def _store(url: str) -> AckStore:
    """One store (and its connection pool) per ledger URL, for the life of the api-server, with
    the settings of its environment (ACKSTORE_METRIC_SOURCES: the sources the strip names)."""
    return AckStore(make_engine(url), Settings.from_env())
