"""What both DAGs' tasks do first: the pipeline settings of this run — the ledger looked up now,
at run time, as the Airflow connection ``ackstore_ledger`` (else ``$ACKSTORE_DATABASE_URL``), and
the DAG run's id as the run id. No DAG here; imports happen inside the call (parsing stays cheap)."""

from __future__ import annotations

from typing import Any


def settings_of_this_run() -> Any:
    from airflow.exceptions import AirflowNotFoundException
    from airflow.sdk import Connection, get_current_context

    from ackstore.ledger.database_url import LEDGER_CONNECTION, DatabaseUrl
    from jobs.settings import PipelineSettings

    try:
        ledger = Connection.get(LEDGER_CONNECTION)
    except AirflowNotFoundException:
        url = None  # PipelineSettings falls back to $ACKSTORE_DATABASE_URL
    else:
        url = DatabaseUrl.from_airflow_connection(ledger).text()
    run_id = get_current_context()["run_id"]
    return PipelineSettings.from_env(url, run_id=run_id, origin=f"the Airflow connection {LEDGER_CONNECTION}")
