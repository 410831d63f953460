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


def test_the_views_are_the_schema_modules(migrated_engine: Engine) -> None:
    """The migrations hold frozen copies of the views; PostgreSQL's own rendering of each must
    equal its rendering of the schema module's query."""
    from sqlalchemy import text

    from ackstore.ledger.schema import LEDGER_VIEWS, REPORT_VIEWS

    with migrated_engine.connect() as conn:
        for name, query in {**LEDGER_VIEWS, **REPORT_VIEWS}.items():
            migrated = conn.execute(text("SELECT pg_get_viewdef(CAST(:v AS regclass))"), {"v": name}).scalar_one()
            conn.execute(text(f"CREATE TEMP VIEW schema_module_view AS {query}"))  # our own constant SQL
            expected = conn.execute(text("SELECT pg_get_viewdef('schema_module_view'::regclass)")).scalar_one()
            conn.execute(text("DROP VIEW schema_module_view"))
            assert migrated == expected, name
        conn.rollback()


def test_the_functions_are_the_schema_modules(migrated_engine: Engine) -> None:
    from sqlalchemy import text

    from ackstore.ledger.schema import LEDGER_FUNCTIONS, REPORT_FUNCTIONS

    with migrated_engine.connect() as conn:
        for name, ddl in {**LEDGER_FUNCTIONS, **REPORT_FUNCTIONS}.items():
            body, parallel = conn.execute(text("SELECT prosrc, proparallel FROM pg_proc WHERE proname = :n"),
                                          {"n": name}).one()
            assert body == ddl.split("$$")[1], name
            assert (parallel == "s") == ("PARALLEL SAFE" in ddl.split("$$")[0]), name
