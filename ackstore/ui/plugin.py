"""The Airflow plugin (registered by the ``airflow.plugins`` entry point in pyproject.toml): the
Ledger page as a FastAPI app at ``/ackstore/ledger``, and a "Ledger" entry in Airflow's navigation
that opens it inside the UI (at ``/plugin/ledger``)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from ackstore.ui.ledger_page import create_app
from ackstore.ui.routes import LEDGER_ROUTE, URL_PREFIX


class LedgerPlugin(AirflowPlugin):
    name = "ackstore"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "ackstore ledger"}]
    external_views = [{"name": "Ledger", "href": f"{URL_PREFIX.lstrip('/')}/", "url_route": LEDGER_ROUTE,
                       "destination": "nav", "category": None}]
