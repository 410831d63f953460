"""Shared fixtures: one fresh PostgreSQL database per test run on the machine's server.

The database is created on 127.0.0.1:5432 (trust auth), migrated with Alembic, emptied
before each test that uses it, and dropped when the run ends. And the order the two workers
take the test files in: the longest first (``LONGEST_FIRST``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import Engine

from ackstore.ledger import migrate
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from tests.support.ledger import empty

# The seal step's heads (ackstore.ledger.heads) of every ledger the tests make, one file per
# database, outside the checkout: set before any test runs the pipeline or a subprocess.
os.environ.setdefault("ACKSTORE_HEADS", os.path.join(tempfile.mkdtemp(prefix="ackstore-heads-"), "{database}.jsonl"))

# The files that take longest, longest first (seconds per file from `pytest --durations=0` of a
# whole run, docs/testing.md), then the rest by folder, costliest folder first. With
# --no-loadscope-reorder (pyproject.toml) the workers take files in this order, so the last file
# each takes is a short one and the two end together; xdist's own order (most tests first) left
# the few-test kill -9, Airflow and benchmark files for the end, on one worker.
LONGEST_FIRST = (
    "system/test_benchmarks_live.py", "system/test_crash.py", "system/test_benchmarks.py",
    "system/test_airflow_running.py", "system/test_amqp_crash.py", "system/test_postgres_restart.py",
    "system/test_amqp10_crash.py", "connectors/test_amqp10_connector.py",
    "system/test_dag.py", "pipeline/test_archive.py", "ledger/test_aggregation_python_and_sql.py",
    "pipeline/test_deep_input.py", "pipeline/test_validate.py", "system/test_cli.py", "connectors/test_mqtt_connector.py",
    "connectors/test_amqp_connector.py", "pipeline/test_archive_lookups.py", "pipeline/test_settle.py",
    "system/test_mqtt_crash.py", "system/test_cli_files.py", "system/test_shown_text.py", "ledger/test_submit_many.py",
    "system/test_ledger_page.py",
)
FOLDERS = ("system", "pipeline", "connectors", "doors", "ledger", "unit")
# Before all of them, on a worker nothing has run on yet: a file that measures the CPU of the
# worker's own process tree (benchmarks.cpu), which a process an earlier test left behind, and
# that leaves the tree inside its window, once made negative (-5.65 s of a 0.5 s burn).
BEFORE_ALL = ("system/test_benchmark_cpu.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def cost_rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::")[0].removeprefix("tests/")
        if path in BEFORE_ALL:
            return (0, BEFORE_ALL.index(path))
        if path in LONGEST_FIRST:
            return (1, LONGEST_FIRST.index(path))
        folder = path.split("/")[0]
        return (2, FOLDERS.index(folder) if folder in FOLDERS else len(FOLDERS))

    stale = [path for path in (*BEFORE_ALL, *LONGEST_FIRST) if not (Path(__file__).parent / path).is_file()]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py BEFORE_ALL / LONGEST_FIRST name files that are not there: {stale}")
    items.sort(key=cost_rank)  # stable: a file's tests keep their order


ADMIN_URL = os.environ.get("ACKSTORE_TEST_ADMIN_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")


# The fixtures below that start or reach a server: a test in tests/unit may use none of them.
SERVER_FIXTURES = frozenset({"database_url", "migrated_engine", "engine", "store", "spark", "spark_remote",
                             "run_pipeline", "own_mosquitto", "own_amqp10"})


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with scratch_database(ADMIN_URL, "test") as url:
        yield url


@pytest.fixture(scope="session")
def migrated_engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def engine(migrated_engine: Engine) -> Engine:
    """The migrated test database, emptied."""
    with migrated_engine.begin() as conn:
        empty(conn)
    return migrated_engine


@pytest.fixture
def store(engine: Engine) -> AckStore:
    return AckStore(engine, Settings())


@pytest.fixture(scope="session")
def spark():
    """One real local Spark session for the run (about 7 s to start)."""
    from jobs.spark import spark_session

    session = spark_session("ackstore-tests", cores=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_remote(tmp_path_factory) -> Iterator[str]:
    """One Spark Connect server per test worker (about 20 s to start; ``make airflow`` runs the
    pipeline this way): tests that start many pipeline or archive processes of their own hand it
    their ``--spark-remote``, so each process is not a JVM of its own (a local session costs a
    process ~15 s more)."""
    from jobs.spark import connect_server

    with connect_server(tmp_path_factory.mktemp("spark-connect")) as remote:
        yield remote


@pytest.fixture
def run_pipeline(spark, engine: Engine, database_url: str):
    """Run pipeline steps (default: all) on the test database; returns their stats. Every step's
    work runs as Spark jobs, however small (``in_driver_rows=0``: what these tests were written to
    check; the driver's path is compared with it in tests/pipeline/test_in_driver.py)."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    def run(*steps: str, **settings) -> dict:
        chosen = steps or tuple(pipeline.STEPS)
        settings = {"partitions": 2, "in_driver_rows": 0, **settings}
        return pipeline.run(spark, PipelineSettings(database_url=database_url, **settings), chosen)

    return run


@pytest.fixture(scope="module")
def own_mosquitto():
    """A Mosquitto broker of the module's own (docker/mosquitto.conf, a free port, a temporary
    folder), never the machine's on 1883; killed and removed after the module."""
    from tests.support.own_mosquitto import OwnMosquitto

    with OwnMosquitto() as broker:
        yield broker


@pytest.fixture(scope="module")
def own_amqp10():
    """An AMQP 1.0 broker of the module's own: a RabbitMQ node with the ``rabbitmq_amqp1_0``
    plugin (AMQP 1.0 and 0.9.1 on one free port), killed and removed after the module."""
    from tests.support.own_rabbitmq import OwnRabbitMQ

    node = OwnRabbitMQ(plugins=("rabbitmq_amqp1_0",))
    node.start()
    yield node
    node.close()
