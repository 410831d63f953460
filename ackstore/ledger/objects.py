"""The ledger's views, functions and triggers: their SQL lives in ``sql/objects/``, never in Python.

``sql/objects/<concept>.sql`` holds the **current** definition of each object (one concept per
file: attempts, built-in facts, request answers, signal state, timeline, each report), as named
blocks (``-- name: <object>``, a comment saying what it is, ``-- version: <revision>``: the migration
that made this definition, then its ``CREATE OR REPLACE`` statement). When a migration replaces
a definition, the one it replaces moves to ``sql/objects/superseded/<object>/<revision>.sql``, so
each version is stored once (Alembic's "replaceable objects"): a migration asks for an object
*as of its own revision* (:func:`definition`), and gets the same text however the files move on.

The tables are SQLAlchemy declarations (``schema.py``): Alembic's autogenerate compares them
with a migrated database. ``tests/ledger/test_migrations.py`` proves that a database migrated from
empty equals one declared from the current files (:func:`declare`), catalog against catalog.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy import Connection

from ackstore.ledger.migrate import ADMIN_ROLE
from ackstore.ledger.named_sql import LEDGER_SQL, ledger_statement, load
from ackstore.ledger.schema import metadata

OBJECTS = LEDGER_SQL / "objects"
SUPERSEDED = OBJECTS / "superseded"

# The concept files in the order their objects are created (each uses only those before it).
CONCEPTS = (
    "rules",
    "locking",
    "signals",
    "attempts",
    "builtin_facts",
    "events",
    "request_answers",
    "signal_state",
    "pipeline",
    "intake",
    "declaring",
    "answering",
    "pulling",
    "carrying_out",
    "sealing",
    "archiving",
    "metrics",
    "connection_log",
    "timeline",
    "reports/window",
    "reports/settlement",
    "reports/audit",
    "reports/latency",
    "reports/watermarks",
    "reports/late_acks",
    "reports/labels",
    "reports/dead_letters",
)
# What the table declarations cannot say (statistics targets), and the grants of the current schema.
TABLE_SETTINGS = OBJECTS / "tables.sql"
GRANTS = OBJECTS / "grants.sql"
# A digest of every stored version: a released version never changes (a change is a new version).
VERSIONS_LOCK = OBJECTS / "versions.lock"
# The blocks of grants.sql that are no role's: each other block is named by the role it grants to.
_NOT_ROLES = ("schema", "definers")

_VERSION = re.compile(r"^-- version: ([0-9]{4})$", re.MULTILINE)
_KIND = re.compile(r"^CREATE OR REPLACE (VIEW|FUNCTION|TRIGGER) ", re.MULTILINE)


def component_roles() -> tuple[str, ...]:
    """The group roles a component's logins are members of (docs/roles.md), as grants.sql names
    its blocks, in its order: the one list of them."""
    return tuple(name for name in load(GRANTS) if name not in _NOT_ROLES)


def group_roles() -> tuple[str, ...]:
    """Every group role the migrations create: the components' and the admin role, which owns
    every object and runs the migrations."""
    return (*component_roles(), ADMIN_ROLE)


def views() -> tuple[str, ...]:
    """The names of the current views."""
    return tuple(name for name, item in current().items() if item.kind == "view")


@dataclass(frozen=True)
class Definition:
    """One version of an object: the migration that made it, and its ``CREATE OR REPLACE``."""

    name: str
    version: str
    ddl: str

    @property
    def kind(self) -> str:
        """'view', 'function' or 'trigger'."""
        return self._create.group(1).lower()

    @property
    def statement(self) -> str:
        """The ``CREATE OR REPLACE`` statement, without the comment above it."""
        return self.ddl[self._create.start():]

    @property
    def _create(self) -> re.Match[str]:
        found = _KIND.search(self.ddl)
        if found is None:
            raise ValueError(f"{self.name} is no CREATE OR REPLACE of a view, function or trigger")
        return found


@lru_cache(maxsize=None)
def current() -> dict[str, Definition]:
    """Every object's current definition, in creation order."""
    found: dict[str, Definition] = {}
    for concept in CONCEPTS:
        for name, ddl in load(OBJECTS / f"{concept}.sql").items():
            version = _VERSION.search(ddl)
            if version is None:
                raise ValueError(f"sql/objects/{concept}.sql: {name} names no '-- version: NNNN'")
            if name in found:
                raise ValueError(f"sql/objects/{concept}.sql: {name} is defined twice")
            found[name] = Definition(name, version.group(1), ddl)
    return found


@lru_cache(maxsize=None)
def versions(name: str) -> dict[str, Definition]:
    """Every stored version of one object, by revision: the superseded ones and the current one."""
    stored = {path.stem: Definition(name, path.stem, path.read_text().strip().rstrip(";"))
              for path in sorted((SUPERSEDED / name).glob("*.sql"))}
    now = current().get(name)
    if now is not None:
        stored[now.version] = now
    return stored


def stored() -> dict[tuple[str, str], Definition]:
    """Every stored version of every object, current and superseded, by (object, revision)."""
    names = {*current(), *(folder.name for folder in SUPERSEDED.iterdir() if folder.is_dir())}
    return {(name, version): item for name in sorted(names) for version, item in versions(name).items()}


def digest(item: Definition) -> str:
    """A version's fingerprint for ``versions.lock``: its statement from ``CREATE`` on (the comment
    above it is documentation, free to change), spacing folded."""
    return hashlib.sha256(re.sub(r"\s+", " ", item.statement).strip().encode()).hexdigest()[:16]


def definition(name: str, revision: str) -> str:
    """Object ``name`` as of migration ``revision``: the newest version made at or before it.
    Migrations call this, for their upgrade (their own revision) and their downgrade (the one
    before), instead of pasting a copy of the SQL."""
    made = [version for version in versions(name) if version <= revision]
    if not made:
        raise LookupError(f"no version of {name} exists at revision {revision}")
    return versions(name)[max(made)].ddl


def create(conn: Connection, name: str, revision: str) -> None:
    """Create (or replace) object ``name`` as of migration ``revision``."""
    conn.exec_driver_sql(_escaped(definition(name, revision)))


def declare(conn: Connection) -> None:
    """Build the declared schema in an empty database: the tables of ``schema.py`` (and Alembic's,
    which the pipeline's and archive's roles read), every current object, the grants — what a
    database migrated from empty must equal. The connection's user owns the database's schema and
    is a member of the admin role, which owns what is made."""
    grants = load(GRANTS)
    conn.exec_driver_sql(grants["schema"])  # the schema's owner grants on it
    conn.exec_driver_sql(f"SET LOCAL ROLE {ADMIN_ROLE}")
    metadata.create_all(conn)
    conn.execute(ledger_statement("migrations", "version_table"))  # Alembic's, as migrate makes it: granted below
    for statement in load(TABLE_SETTINGS).values():
        conn.exec_driver_sql(_escaped(statement))
    for item in current().values():
        conn.exec_driver_sql(_escaped(item.ddl))
    for role, statements in grants.items():
        if role != "schema":
            conn.exec_driver_sql(_escaped(statements))


def _escaped(sql: str) -> str:
    """SQL for exec_driver_sql: psycopg2 reads a bare % as a parameter's start."""
    return sql.replace("%", "%%")
