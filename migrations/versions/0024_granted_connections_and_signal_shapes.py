"""a connection only for the login granted it, a signal only of a shape ingestion takes

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28 12:00:00

Issue 50. ``claim_connection`` no longer gives an unclaimed connection to whichever ingest login
asks first (another login taking an id before its connector's first start made that connector
exit): an operator reserves it for a login (``reserve_connection``, new; ``ackstore connection
reserve``), and only a login that may write ``connections`` itself — the admin role's, a
superuser — still claims one by first use. ``signals`` takes only the shapes ingestion's Python
takes (``ck_signals_shape``: each kind on its channel, with one of its actions): ``insert_signal``
stored any action, ``bogus`` applied as a modify. ``log_connection_event`` keeps a time between the
connection's claim and now (``connection_time``, the one spelling of that range; a time of year 1
or BC made ``connection logs`` a traceback), and the entries logged before are brought into it.

A ledger holding a signal of another shape (stored by a direct call of a write function since
migration 0016) keeps the constraint NOT VALID: it holds for every new signal, and the sealed old
ones stay as they are; the migration says how many.
"""

from __future__ import annotations

import logging

from alembic import op
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None

REPLACED = ("claim_connection", "log_connection_event")
NEW = ("connection_time", "reserve_connection")  # connection_time before log_connection_event, which uses it
NEW_FUNCTIONS = ("reserve_connection(text, text)", "connection_time(timestamptz, timestamptz)")
# Ingestion's shapes as of this revision (ackstore.rules.envelopes.SIGNAL_SHAPES, which
# ackstore.ledger.schema writes the constraint from; tests/ledger/test_migrations.py holds the two equal).
SHAPE = ("(kind = 'twin-command' AND channel = 'twin' AND action IN ('create', 'modify', 'merge', 'delete')) OR "
         "(kind = 'live-command' AND channel = 'live' AND action IN ('create', 'modify', 'merge', 'delete', 'retrieve')) "
         "OR (kind = 'live-message' AND channel = 'live' AND action <> '')")

log = logging.getLogger("ackstore.migrations")


def upgrade() -> None:
    bind = op.get_bind()
    op.execute(f"ALTER TABLE signals ADD CONSTRAINT ck_signals_shape CHECK ({SHAPE}) NOT VALID")
    _validate_shapes(bind)
    for name in (*NEW, *REPLACED):
        objects.create(bind, name, revision)
    op.execute("UPDATE connection_log l SET happened_at = connection_time(c.claimed_at, l.happened_at) "
               "FROM connections c WHERE c.id = l.connection "
               "AND l.happened_at IS DISTINCT FROM connection_time(c.claimed_at, l.happened_at)")
    op.execute(ledger_statement("migrations", "own_everything"))


def downgrade() -> None:
    bind = op.get_bind()
    for name in REPLACED:
        objects.create(bind, name, down_revision)
    for signature in NEW_FUNCTIONS:
        op.execute(f"DROP FUNCTION {signature}")
    op.execute("ALTER TABLE signals DROP CONSTRAINT ck_signals_shape")


def _validate_shapes(bind) -> None:  # type: ignore[no-untyped-def]
    """Validate the constraint over the stored signals (one scan), unless one of them breaks it."""
    savepoint = bind.begin_nested()
    try:
        bind.execute(text("ALTER TABLE signals VALIDATE CONSTRAINT ck_signals_shape"))
    except IntegrityError:
        savepoint.rollback()
        odd = bind.execute(text(f"SELECT count(*) FROM signals WHERE NOT ({SHAPE})")).scalar_one()
        log.warning("migration 0024: %d stored signal(s) have a kind, channel or action ingestion does not take "
                    "(stored by a direct call of a write function): ck_signals_shape holds for new signals only "
                    "(NOT VALID)", odd)
        return
    savepoint.commit()
