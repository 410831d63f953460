"""the pipeline reads no seal's leaves

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28 17:45:00

The seal step writes a seal's leaves (COPY) and never reads them: the verifier and the exports,
which do, run as the reporter and the archive. Migration 0018 granted the pipeline SELECT as well;
a grant nothing uses is one too many (tests/pipeline/test_roles.py found it so).
"""

from __future__ import annotations

from alembic import op

from migrations.roles import roles_exist

revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if roles_exist():
        op.execute("REVOKE SELECT ON seal_leaves FROM ackstore_pipeline")


def downgrade() -> None:
    if roles_exist():
        op.execute("GRANT SELECT ON seal_leaves TO ackstore_pipeline")
