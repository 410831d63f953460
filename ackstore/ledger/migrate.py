"""Running the Alembic migrations: the only way the ledger's schema is created or changed."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

import migrations
from ackstore.ledger.named_sql import ledger_statement

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


ADMIN_ROLE = "ackstore_admin"


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to ``revision`` (default: the newest). A member of ``ackstore_admin``
    migrates as that role, so that every object it creates is the admin role's (docs/roles.md)."""
    _migrate(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Take the database back to ``revision``, as :func:`upgrade` takes it forward."""
    _migrate(engine, command.downgrade, revision)


def _migrate(engine: Engine, move: Callable[[Config, str], None], revision: str) -> None:
    with engine.begin() as connection:
        connection.execute(ledger_statement("migrations", "database_settings"))  # as the session user
        if connection.execute(text(  # (a database migrated before 0006 is the current user's to migrate)
                "SELECT pg_has_role(current_user, oid, 'MEMBER') AND has_schema_privilege(oid, current_schema(), 'CREATE') "
                "FROM pg_roles WHERE rolname = :r"), {"r": ADMIN_ROLE}).scalar():
            # What an earlier run made as its session user (a superuser migrating from empty) becomes
            # the admin role's first: as the admin role, the migrations could not replace it.
            connection.execute(ledger_statement("migrations", "own_everything"))
            connection.execute(text(f"SET LOCAL ROLE {ADMIN_ROLE}"))
        config = alembic_config(engine.url.render_as_string(hide_password=False))
        config.attributes["connection"] = connection
        move(config, revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()
