"""built-in and stored acks read attempt 1 from its signal

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-30 03:00:00

Issue 52 (decisions #147), the next step of #146: the views builtin_acks and request_acks take
attempt 1's labels, opening and deadline from the signal (attempt_value) and a redelivery's from
its own row, so that they answer the same whether attempt 1's row is stored or not. builtin_acks
enumerates a signal's attempts as its redeliveries' rows, each standing for itself and one of them
(attempt 2's, or the one row when there is none) for attempt 1 too. Nothing stored changes; the
trigger still writes attempt 1.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects

revision = '0035'
down_revision = '0034'
branch_labels = None
depends_on = None


def upgrade() -> None:
    objects.create(op.get_bind(), "builtin_acks", revision)
    objects.create(op.get_bind(), "request_acks", revision)


def downgrade() -> None:
    objects.create(op.get_bind(), "builtin_acks", "0032")
    objects.create(op.get_bind(), "request_acks", "0018")
