"""the pipeline's and the archive's steps read which migration the ledger is at

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-29 22:00:00

A step writes the forms of the migration its code was written for (0029 and 0031 store answers
their views derive): new code on a ledger not yet migrated wrote rows the older views misread,
until a later statement failed. Each step now reads alembic_version first and refuses a ledger not
at its newest migration (ledger:migration.pending, or .unknown for a newer ledger): the pipeline's
and the archive's roles may read it.
"""

from __future__ import annotations

from alembic import op

from migrations.roles import roles_exist

revision = '0033'
down_revision = '0032'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if roles_exist():
        op.execute("GRANT SELECT ON alembic_version TO ackstore_pipeline, ackstore_archive")


def downgrade() -> None:
    if roles_exist():
        op.execute("REVOKE SELECT ON alembic_version FROM ackstore_pipeline, ackstore_archive")
