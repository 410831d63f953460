"""
### ackstore_archive — settled history leaves the hot tables, every day

One task (`archive`) runs `jobs.archive.run` — exactly what `ackstore archive` runs: the seals
after the archived prefix that were made before the retention began (`$ACKSTORE_RETENTION_DAYS`,
default 30), cut before the first one holding a fact of a signal that is not settled and
validated, are written as Parquet under the archive's root (`$ACKSTORE_ARCHIVE`, default
`$ACKSTORE_HOME/archive`; any Hadoop URI such as `s3a://…`), one dataset per table partitioned by
day (`<table>/dt=YYYY-MM-DD/range=F-L/`), with a manifest per day (`_manifests/`). The rows are
read back and each seal's Merkle root recomputed from them; only then does one transaction record
the archive (`archives`) and delete its rows from the hot tables (decisions #102).

**Why a re-run or a retried task is safe.** Nothing is deleted before the read-back matched every
seal; the delete and its record are one transaction; a re-run overwrites exactly the partitions of
the prefix it archives. Killed at any point, every row is hot or archived, once
(`tests/pipeline/test_archive.py`).

**Where.** The ledger is the Airflow connection `ackstore_ledger`, else `$ACKSTORE_DATABASE_URL`;
its login must be a member of `ackstore_archive` (docs/roles.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task

DEFAULT_ARGS = {
    "owner": "ackstore",
    "retries": 2,
    "retry_delay": timedelta(minutes=5),
    "execution_timeout": timedelta(hours=6),
}


def _run_archive() -> dict[str, Any]:
    """The archive job for this DAG run (the ledger and run id looked up now: ledger_connection.py)."""
    from ledger_connection import settings_of_this_run

    from jobs import archive
    from jobs.spark import LazySession

    spark = LazySession("ackstore-archive")  # opened only when a prefix may leave
    try:
        return archive.run(spark, settings_of_this_run())
    finally:
        spark.stop()


@dag(
    dag_id="ackstore_archive",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["ackstore", "ledger", "archive"],
    doc_md=__doc__,
)
def ackstore_archive() -> None:
    @task
    def archive() -> dict[str, Any]:
        return _run_archive()

    archive()


ackstore_archive()
