"""an ack's facts never change: only its disposition may

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 17:00:00

* ``acks_keep_their_facts``: a trigger refuses an UPDATE that sets any column of an ack but its
  disposition (issue 26: a login with UPDATE on acks could rewrite a subscriber's status, label,
  issuer or payload). The sweep's ``flag_late`` sets the disposition alone.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    objects.create(op.get_bind(), "acks_keep_their_facts", revision)
    # a superuser migrating from empty runs as itself throughout: the trigger becomes the admin role's
    op.execute(ledger_statement("migrations", "own_everything"))


def downgrade() -> None:
    op.execute("DROP TRIGGER acks_keep_their_facts ON acks")
