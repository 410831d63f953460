"""The Ledger page: the QoS-1 audit inside Airflow's UI (a FastAPI app mounted by the plugin).

It reads the ledger through the Airflow connection the DAG uses (``ackstore_ledger``), and every
number on it comes from the reports' own functions (ackstore.ledger.reports): the settlement status
per source, the watermarks of the last 24 hours and what is not settled after them, the open-work
audit (oldest first), the latency per source and hour, and one signal's timeline found by its
correlation id. Every route requires an authenticated Airflow user: plugin routes are not
authenticated by Airflow by default.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from ackstore.ledger import reports
from ackstore.ledger.database import make_engine
from ackstore.ledger.database_url import LEDGER_CONNECTION, DatabaseUrl
from ackstore.ledger.reports import Window
from ackstore.ledger.store import AckStore
from ackstore.report import MEASURES, instant, seconds
from ackstore.rules.settings import Settings
from ackstore.ui.chart import latency_svg

WINDOW = timedelta(hours=24)
AUDIT_ROWS = 20
CHARTED = "received_to_decided"

_templates = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                         autoescape=select_autoescape(["html"]))
_templates.filters["seconds"] = lambda value: "" if value is None else seconds(value)
_templates.filters["time"] = lambda value: "" if value is None else instant(value)


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


def gather(store: AckStore, now: datetime, correlation_id: str | None = None) -> dict[str, Any]:
    """What the page shows, each part read by its report."""
    window = Window(now - WINDOW, now)
    with store.engine.connect() as conn:
        latency = reports.latency(conn, window, timedelta(hours=1), 10_000)
        page = {
            "now": now, "window": window,
            "settlement": reports.settlement_status(conn),
            "watermarks": reports.watermarks(conn, window, 1_000),
            "unsettled": reports.unsettled(conn, window, AUDIT_ROWS),
            "audit": reports.qos1_audit(conn, AUDIT_ROWS),
            "latency": latency,
        }
    sources = list(dict.fromkeys(row["source"] for row in latency))
    page["charts"] = [{"source": source, "rows": [r for r in latency if r["source"] == source]} for source in sources]
    for chart in page["charts"]:
        chart["svg"] = Markup(latency_svg(chart["rows"], window.since, window.until, CHARTED))
    page["measures"] = MEASURES
    page["charted"] = MEASURES[CHARTED]
    page["search"] = correlation_id
    if correlation_id:
        page["signal"] = store.show(correlation_id)
        page["timeline"] = page["signal"]["timeline"] if page["signal"] else []
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
    """One store (and its connection pool) per ledger URL, for the life of the api-server."""
    return AckStore(make_engine(url), Settings())
