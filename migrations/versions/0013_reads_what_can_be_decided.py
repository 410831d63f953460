"""the sweep reads only what can be decided: requests awaiting their command's response stay out

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 14:00:00

* ``awaits_command_response(deadline_at, requested_acks, response_required, responded)``: a request
  whose deadline has not passed, with no stored response, that asked for a built-in ack of its
  command (or, asking for none, for the response) cannot be decided yet. The sweep's read leaves
  these out: under steady traffic they were most of the queue (every command that arrived while a
  run applied the ones before it), read, shipped to Spark and answered "not yet" every run.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

SIGNATURE = "awaits_command_response(timestamptz, text[], boolean, boolean)"


def upgrade() -> None:
    objects.create(op.get_bind(), "awaits_command_response", revision)
    # a superuser migrating from empty runs as itself throughout: the new function becomes the admin role's
    op.execute(ledger_statement("migrations", "own_everything"))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {SIGNATURE}")
