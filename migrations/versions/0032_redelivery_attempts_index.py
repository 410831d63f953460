"""a redelivery's attempts have their own index, which the readers of a later attempt use

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29 21:30:00

Issue 52 (decisions #144): the readers of a signal's next or later attempt — current_attempts'
anti-join, builtin_acks' next attempt, the gate's — joined every attempt to find the few that a
redelivery opened, so a backlog hashed a million attempts to find none. redelivery_attempt is the
rule (an attempt after the first); ix_attempts_redelivery holds those attempts alone, and each
reader now says its later attempt is one, so the planner reads that index. Nothing stored changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0032'
down_revision = '0031'
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    op.create_index("ix_attempts_redelivery", "attempts", ["signal_id", "attempt"],
                    postgresql_where=sa.text("attempt > 1"))
    objects.create(bind, "redelivery_attempt", revision)
    objects.create(bind, "current_attempts", revision)
    objects.create(bind, "builtin_acks", revision)
    op.execute(ledger_statement("migrations", "own_everything"))  # a superuser's new function: the admin role's


def downgrade() -> None:
    bind = op.get_bind()
    objects.create(bind, "current_attempts", "0008")
    objects.create(bind, "builtin_acks", "0008")
    op.execute("DROP FUNCTION redelivery_attempt(integer)")
    op.drop_index("ix_attempts_redelivery", table_name="attempts")
