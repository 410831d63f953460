"""Shared fixtures: one fresh PostgreSQL database per test run on the machine's server.

The database is created on 127.0.0.1:5432 (trust auth), migrated with Alembic, emptied
before each test that uses it, and dropped when the run ends.
"""

from __future__ import annotations

import os
import tempfile
from typing import Iterator

import pytest
from sqlalchemy import Engine

from ackstore.ledger import migrate
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from tests.ledger import empty

# The seal step's heads (ackstore.ledger.heads) of every ledger the tests make, one file per
# database, outside the checkout: set before any test runs the pipeline or a subprocess.
os.environ.setdefault("ACKSTORE_HEADS", os.path.join(tempfile.mkdtemp(prefix="ackstore-heads-"), "{database}.jsonl"))

ADMIN_URL = os.environ.get("ACKSTORE_TEST_ADMIN_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")


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


@pytest.fixture
def run_pipeline(spark, engine: Engine, database_url: str):
    """Run pipeline steps (default: all) on the test database; returns their stats."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    def run(*steps: str, **settings) -> dict:
        chosen = steps or tuple(pipeline.STEPS)
        return pipeline.run(spark, PipelineSettings(database_url=database_url, partitions=2, **settings), chosen)

    return run


@pytest.fixture(scope="module")
def own_mosquitto():
    """A Mosquitto broker of the module's own (docker/mosquitto.conf, a free port, a temporary
    folder), never the machine's on 1883; killed and removed after the module."""
    from tests.own_mosquitto import OwnMosquitto

    with OwnMosquitto() as broker:
        yield broker
