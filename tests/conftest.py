"""Shared fixtures: one fresh PostgreSQL database per test run on the machine's server.

The database is created on 127.0.0.1:5432 (trust auth), migrated with Alembic, emptied
before each test that uses it, and dropped when the run ends.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger import migrate
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.schema import LEDGER_TABLES
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings

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
    names = ", ".join(table.name for table in LEDGER_TABLES)
    with migrated_engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
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
