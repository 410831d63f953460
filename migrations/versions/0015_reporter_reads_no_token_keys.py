"""the reporter reads a delivery but not the key its ack-tokens are made with

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 17:30:00

* ``ackstore_reporter`` held SELECT on all of ``deliveries``; ``show`` reads who a signal was
  handed to and how often, never ``token_key`` — with which a reporter's login could mint a
  valid ack-token for any hand-out (issue 26). It now holds SELECT on every other column.
"""

from __future__ import annotations

from alembic import op

from migrations.roles import roles_exist

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

SHOWN = ("subscriber_id, signal_id, attempt, event_id, handouts, available_at, leased_at, done_at, "
         "answered_handout, answered_labels")


def upgrade() -> None:
    if roles_exist():
        op.execute("REVOKE SELECT ON deliveries FROM ackstore_reporter")
        op.execute(f"GRANT SELECT ({SHOWN}) ON deliveries TO ackstore_reporter")


def downgrade() -> None:
    if roles_exist():
        op.execute(f"REVOKE SELECT ({SHOWN}) ON deliveries FROM ackstore_reporter")
        op.execute("GRANT SELECT ON deliveries TO ackstore_reporter")
