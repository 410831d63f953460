"""Kill -9 between staging and merge, in every step; the re-run must give the same ledger.

Each scenario loads the same workload into a fresh database, runs ``ackstore pipeline run``
as a subprocess that SIGKILLs itself at a fault point (``ACKSTORE_FAULT``), checks that the
kill happened where intended (staged rows, nothing merged), re-runs, and compares the ledger
with the one an uninterrupted run produced — every column but wall-clock timestamps and
surrogate ids (whose order may differ).

The runs use the worker's Spark Connect server (as ``make airflow`` does), so that a case costs
its pipeline and not two JVM start-ups; one case (``LOCAL_SESSION``) is killed with a local Spark
session of its own inside the process, and re-run on one.
"""

from __future__ import annotations

import signal
from typing import Iterator

import pytest
from sqlalchemy import select, text

from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.schema import STAGING_TABLES
from tests.conftest import ADMIN_URL
from tests.support.ledger import comparable_ledger, load_workload, pipeline_subprocess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LOCAL_SESSION = "sweep:staged"  # Spark has staged the decisions inside the killed process's own JVM


def staged_rows(url: str) -> int:
    engine = make_engine(url)
    with engine.connect() as conn:
        count = sum(conn.execute(select(text("count(*)")).select_from(t)).scalar_one() for t in STAGING_TABLES)
    engine.dispose()
    return count


def _awaiting_validation(url: str) -> int:
    engine = make_engine(url)
    with engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM awaiting_validation()")).scalar_one()
    engine.dispose()
    return count


@pytest.fixture(scope="module")
def reference(spark_remote: str) -> Iterator[dict[str, list[tuple]]]:
    with scratch_database(ADMIN_URL, "crashref") as url:
        load_workload(url)
        done = pipeline_subprocess(url, remote=spark_remote)
        assert done.returncode == 0, done.stderr[-3000:]
        ledger = comparable_ledger(url)
        assert len(ledger["request_results"]) == 14 and len(ledger["search_index"]) > 0
        assert len(ledger["settlements"]) == 7 and not ledger["queue_settle"]
        yield ledger


@pytest.mark.parametrize(
    "fault, merged_tables",
    [
        ("apply_twin:staged", ()),
        ("index_search:staged", ("command_responses",)),
        ("weak_acks:staged", ("command_responses", "search_things")),
        ("sweep:common", ("command_responses", "search_things", "request_results")),  # decided in SQL
        ("sweep:staged", ("command_responses", "search_things", "request_results")),
        ("sweep:merged", ("command_responses", "search_things", "request_results")),
        ("validate:staged", ("command_responses", "search_things", "request_results")),
        # the successes acked in SQL, the failures still queued for Spark
        ("settle:common", ("command_responses", "search_things", "request_results", "queue_settle", "settlements")),
        ("settle:staged", ("command_responses", "search_things", "request_results", "queue_settle", "settlements")),
        ("settle:merged", ("command_responses", "search_things", "request_results", "settlements")),
    ],
)
def test_kill_9_then_rerun_gives_the_uninterrupted_ledger(reference, spark_remote: str, fault: str,
                                                          merged_tables: tuple) -> None:
    remote = None if fault == LOCAL_SESSION else spark_remote
    with scratch_database(ADMIN_URL, "crash") as url:
        load_workload(url)
        killed = pipeline_subprocess(url, fault, remote=remote)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        after_kill = comparable_ledger(url)
        step_outputs = {"command_responses", "search_things", "request_results", "queue_settle", "settlements"}
        for table in step_outputs:
            assert bool(after_kill[table]) == (table in merged_tables), table  # merged up to the fault, no further
        if fault == "validate:staged":  # validate stages nothing (it reads its slice where it lies):
            assert _awaiting_validation(url) > 0  # the kill fell before its pass moved the watermark
        elif fault.endswith(":staged"):
            assert staged_rows(url) > 0  # the kill fell between staging and merge

        rerun = pipeline_subprocess(url, remote=remote)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert comparable_ledger(url) == reference
        assert staged_rows(url) == 0
