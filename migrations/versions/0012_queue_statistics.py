"""work-queue statistics: refreshed by a relative threshold, while a queue holds its work

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 10:00:00

* ``refresh_statistics(table, written)`` analyzes a table when ``written`` is a tenth or more of
  the rows its statistics know, or they know of none, from 100 rows on (it was 10 000): a run of
  a few thousand rows was planned as one row each side of the queue's removal — a nested loop
  whose cost is the square of the run (15 s to remove 6 000 finished items). The steps now take
  a queue's statistics while it holds the work its next statements read, never right after
  emptying it (an ANALYZE of an emptied queue told the planner that the next run's work was one
  row). Code only: no table changes.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    objects.create(op.get_bind(), "refresh_statistics", revision)  # same signature: owner and grants stay


def downgrade() -> None:
    objects.create(op.get_bind(), "refresh_statistics", down_revision)
