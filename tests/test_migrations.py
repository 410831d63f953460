"""The schema module and the Alembic migrations describe the same database."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from ackstore.ledger import migrate
from ackstore.ledger.schema import metadata


def test_migrations_reach_head(migrated_engine: Engine) -> None:
    assert migrate.current_revision(migrated_engine) == migrate.head_revision()


def test_replayed_migrations_equal_the_schema_module(migrated_engine: Engine) -> None:
    with migrated_engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        assert compare_metadata(context, metadata) == []


def test_upgrade_is_idempotent(migrated_engine: Engine) -> None:
    migrate.upgrade(migrated_engine)
    assert migrate.current_revision(migrated_engine) == migrate.head_revision()
