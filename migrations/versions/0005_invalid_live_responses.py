"""invalid live responses kept for the audit

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 09:50:00

A live response that does not answer its command (another thing, another resource path, a
response of another type: Ditto's ``CommandAndCommandResponseMatchingValidator``) is refused,
and kept as an ack with the disposition ``invalid`` and the ``reason`` it was refused for — a
408 ``command.timeout`` then names that reason.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

OLD = "disposition IN ('counted', 'duplicate', 'late', 'unrequested')"
NEW = "disposition IN ('counted', 'duplicate', 'late', 'unrequested', 'invalid')"


def upgrade() -> None:
    op.add_column('acks', sa.Column('reason', sa.Text(), nullable=True))
    op.drop_constraint(op.f('ck_acks_disposition'), 'acks', type_='check')
    op.create_check_constraint(op.f('ck_acks_disposition'), 'acks', NEW)
    op.create_check_constraint(op.f('ck_acks_reason'), 'acks', "(disposition = 'invalid') = (reason IS NOT NULL)")
    op.create_index('ix_acks_invalid', 'acks', ['signal_id', 'attempt'], postgresql_where=sa.text("disposition = 'invalid'"))


def downgrade() -> None:
    op.execute("DELETE FROM acks WHERE disposition = 'invalid'")
    op.drop_index('ix_acks_invalid', table_name='acks', postgresql_where=sa.text("disposition = 'invalid'"))
    op.drop_constraint(op.f('ck_acks_reason'), 'acks', type_='check')
    op.drop_constraint(op.f('ck_acks_disposition'), 'acks', type_='check')
    op.create_check_constraint(op.f('ck_acks_disposition'), 'acks', OLD)
    op.drop_column('acks', 'reason')
