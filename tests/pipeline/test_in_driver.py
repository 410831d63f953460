"""A step's work that fits one task runs that task's function in the driver (decisions #110):
the same ledger as Spark's tasks make of it, and no Spark session for a minute's common work."""

from __future__ import annotations

import pytest

from ackstore.ledger.database import scratch_database
from ackstore.ledger.store import AckStore
from jobs import pipeline
from jobs.settings import IN_DRIVER_ROWS, PipelineSettings
from jobs.spark import LazySession
from tests.conftest import ADMIN_URL
from tests.support.ledger import comparable_ledger, load_workload, twin_command

pytestmark = pytest.mark.spark


def test_the_driver_makes_the_ledger_spark_makes(spark) -> None:
    """The crash tests' workload (creates, modifies, failures, custom and weak acks, a broker's
    settlements), one pass each way: every column of every table equal but times and ids."""
    ledgers, staged_in = [], []
    for in_driver_rows in (0, IN_DRIVER_ROWS):
        with scratch_database(ADMIN_URL, "indriver") as url:
            load_workload(url)
            stats = pipeline.run(spark, PipelineSettings(database_url=url, partitions=2, in_driver_rows=in_driver_rows,
                                                         run_id="same"))
            ledgers.append(comparable_ledger(url))
            staged_in.append((stats["apply_twin"]["staged_in"], stats["index_search"]["staged_in"]))
    assert staged_in == [("spark", "spark"), ("driver", "driver")]
    assert len(ledgers[0]["request_results"]) == 14
    assert ledgers[0] == ledgers[1]


def test_more_rows_than_the_limit_go_to_spark(store: AckStore, spark, database_url: str) -> None:
    for i in range(3):
        store.submit(twin_command("create", thing=f"org.acme/t{i}", path="/", value={}, correlation_id=f"c{i}"))
    stats = pipeline.run(spark, PipelineSettings(database_url=database_url, in_driver_rows=2, run_id="over"))
    assert stats["apply_twin"]["staged_in"] == "spark" and stats["apply_twin"]["commands"] == 3
    assert stats["index_search"]["staged_in"] == "spark" and stats["index_search"]["things"] == 3


def test_a_minutes_common_work_opens_no_spark_session(store: AckStore, database_url: str) -> None:
    """Twin commands asking for the built-in acks, decided and settled in SQL, applied and
    indexed in the driver: the pass does all of it without a Spark session."""
    both = ["twin-persisted", "search-persisted"]
    for i in range(20):
        store.submit(twin_command("modify", thing=f"org.acme/t{i % 4}", path="/", value={"attributes": {"n": i}},
                                  correlation_id=f"c{i}", requested_acks=both))
    session = LazySession("never-opened")
    stats = pipeline.run(session, PipelineSettings(database_url=database_url, run_id="small"))
    assert not session.opened
    assert stats["apply_twin"]["commands"] == 20 and stats["index_search"]["things"] == 4
    assert {store.result(f"c{i}")["status"] for i in range(20)} == {200}
    assert store.search("eq(attributes/n,19)")["items"] == ["org.acme:t3"]
