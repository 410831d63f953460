"""Running the Alembic migrations: the only way the ledger's schema is created or changed."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

from alembic import command, util
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import IntegrityError, ProgrammingError

import migrations
from ackstore.ledger import failures
from ackstore.ledger.named_sql import ledger_statement
from ackstore.rules import errors

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


ADMIN_ROLE = "ackstore_admin"
UNIQUE_VIOLATION, DUPLICATE_TABLE = "23505", "42P07"  # a concurrent CREATE TABLE IF NOT EXISTS lost the race


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to ``revision`` (default: the newest). A member of ``ackstore_admin``
    migrates as that role, so that every object it creates is the admin role's (docs/roles.md)."""
    _migrate(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Take the database back to ``revision``, as :func:`upgrade` takes it forward."""
    _migrate(engine, command.downgrade, revision)


def _migrate(engine: Engine, move: Callable[[Config, str], None], revision: str) -> None:
    _make_version_table(engine)
    with engine.begin() as connection:
        connection.execute(ledger_statement("migrations", "migration_lock"))  # one migration at a time
        connection.execute(ledger_statement("migrations", "database_settings"))  # as the session user
        if _as_admin(connection):
            # What an earlier run made as its session user (a superuser migrating from empty) becomes
            # the admin role's first: as the admin role, the migrations could not replace it.
            connection.execute(ledger_statement("migrations", "own_everything"))
            connection.execute(text(f"SET LOCAL ROLE {ADMIN_ROLE}"))
        config = alembic_config(engine.url.render_as_string(hide_password=False))
        config.attributes["connection"] = connection
        move(config, revision)


def _as_admin(connection: Connection) -> bool:
    return bool(connection.execute(ledger_statement("migrations", "may_migrate_as_admin"), {"role": ADMIN_ROLE}).scalar())


def _make_version_table(engine: Engine) -> None:
    """Alembic's version table, whose lock orders the migrations, made in a transaction of its own
    (as the admin role when the user may: it owns what the migrations make). A concurrent first
    upgrade that made it meanwhile is no failure."""
    try:
        with engine.begin() as connection:
            if _as_admin(connection):
                connection.execute(text(f"SET LOCAL ROLE {ADMIN_ROLE}"))
            connection.execute(ledger_statement("migrations", "version_table"))
    except (IntegrityError, ProgrammingError) as error:
        if failures.sqlstate(error) not in (UNIQUE_VIOLATION, DUPLICATE_TABLE):
            raise


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


@functools.cache
def _scripts() -> ScriptDirectory:
    """The migrations (read once a process: a step asks for the newest before it writes)."""
    return ScriptDirectory.from_config(alembic_config("postgresql://"))


def head_revision() -> str | None:
    """The newest migration this code knows: the ledger it writes."""
    return _scripts().get_current_head()


def refuse_unless_at_head(connection: Connection) -> None:
    """Raise ``ledger:migration.pending`` (or ``.unknown``) unless the ledger is at this code's
    newest migration: new code on an older ledger writes forms the older views misread (a
    derived answer read as a stored NULL), old code on a newer one forms its readers refuse."""
    revision = connection.execute(ledger_statement("migrations", "ledger_revision")).scalar()
    head = head_revision()
    if revision != head:
        raise errors.ledger_not_at_head(revision, head, known=revision is None or _known(revision))


def _known(revision: str) -> bool:
    try:
        return _scripts().get_revision(revision) is not None
    except util.CommandError:  # a revision it does not have (ResolutionError is one)
        return False
