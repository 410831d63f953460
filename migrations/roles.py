"""What the migrations share about the least-privilege roles of migration 0006 (docs/roles.md).

Frozen like the migrations that call it: a role added later is a new migration's, not a new
name here (``roles_exist`` would then be false for every earlier migration on a new database).
So these are the roles of 0006, not the current ones: those are grants.sql's
(``ackstore.ledger.objects.group_roles``), which everything but the old migrations reads."""

from __future__ import annotations

from alembic import op

READERS = ("ackstore_ingest", "ackstore_pipeline", "ackstore_reporter")
ROLES = (*READERS, "ackstore_admin")


def roles_exist() -> bool:
    """Whether the group roles exist: a user that may not create roles gets none, nor grants."""
    found = op.get_bind().exec_driver_sql("SELECT count(*) FROM pg_roles WHERE rolname = ANY (%(r)s)",
                                          {"r": list(ROLES)})
    return found.scalar_one() == len(ROLES)


def owned_by_admin(kind: str, name: str) -> None:
    """A new object belongs to the admin role, as 0006 made every object (when its user may).
    ``kind`` and ``name`` are a migration's own words (e.g. 'FUNCTION', 'f(text)'), never input."""
    op.execute(f"""
DO $$ BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'ackstore_admin') THEN  -- else pg_has_role raises
    IF pg_has_role(current_user, 'ackstore_admin', 'MEMBER') THEN
      ALTER {kind} {name} OWNER TO ackstore_admin;
    END IF;
  END IF;
END $$""")
