"""attempt 1 is its signal: the gate takes an attempt's values from the signal or a redelivery's row

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-29 23:45:00

Issue 52 (decisions #146): attempt 1 of a request says what its signal says — the trigger copies
the signal's labels, time and deadline into its row — so a reader needs no row of attempt 1.
attempt_value is the rule: an attempt's value from the signal for attempt 1, from the
redelivery's own row (redelivery_attempt, ix_attempts_redelivery) for a later one; attempt_found
says whether it is there. The validation gate reads its requests' attempts through them: a
backlog's slice hashes the few redeliveries, not a row of attempts per request. Nothing stored
changes; the trigger still writes attempt 1.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0034'
down_revision = '0033'
branch_labels = None
depends_on = None


def upgrade() -> None:
    objects.create(op.get_bind(), "attempt_value", revision)
    objects.create(op.get_bind(), "attempt_found", revision)
    op.execute(ledger_statement("migrations", "own_everything"))  # a superuser's new function: the admin role's


def downgrade() -> None:
    op.execute("DROP FUNCTION attempt_found(integer, boolean)")
    op.execute("DROP FUNCTION attempt_value(integer, anyelement, anyelement)")
