"""the HTTP API reads twins

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-28 18:30:00

Issue 51: Ditto's HTTP API answers ``GET /api/2/things/<id>`` and a search's items with the
twins as the pipeline applied them; each request acts as the login it authenticated as, an
ingest login, which could read the search index but not the things.
"""

from __future__ import annotations

from alembic import op

from migrations.roles import roles_exist

revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if roles_exist():
        op.execute("GRANT SELECT ON things TO ackstore_ingest")


def downgrade() -> None:
    if roles_exist():
        op.execute("REVOKE SELECT ON things FROM ackstore_ingest")
