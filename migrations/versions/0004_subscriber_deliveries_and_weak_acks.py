"""subscriber deliveries (pull with leases), the weak-ack step's staging, declared labels in the gate

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 13:40:00

Subscribers pull twin events and live signals (A.3): ``subscribers.event_position`` is how far
each has read the event log, and ``deliveries`` holds one row per signal handed to a subscriber,
with its hand-out count and lease. Existing subscribers start at the end of the event log, as a
new subscription does.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('subscribers', sa.Column('event_position', sa.BigInteger(), server_default=sa.text('0'), nullable=False))
    op.execute('UPDATE subscribers SET event_position = (SELECT COALESCE(max(id), 0) FROM thing_events)')
    op.create_table('deliveries',
    sa.Column('subscriber_id', sa.Text(), nullable=False),
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('event_id', sa.BigInteger(), nullable=True),
    sa.Column('token_key', sa.Text(), nullable=False),
    sa.Column('handouts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('available_at', postgresql.TIMESTAMP(timezone=True), nullable=False),
    sa.Column('leased_at', postgresql.TIMESTAMP(timezone=True), nullable=True),
    sa.Column('done_at', postgresql.TIMESTAMP(timezone=True), nullable=True),
    sa.Column('answered_handout', sa.Integer(), nullable=True),
    sa.Column('answered_labels', postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False),
    sa.CheckConstraint('handouts >= 0 AND attempt > 0', name=op.f('ck_deliveries_counts')),
    sa.CheckConstraint('answered_handout IS NULL OR answered_handout BETWEEN 1 AND handouts', name=op.f('ck_deliveries_answered')),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_deliveries_signal_id_signals'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['subscriber_id'], ['subscribers.id'], name=op.f('fk_deliveries_subscriber_id_subscribers'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('subscriber_id', 'signal_id', name=op.f('pk_deliveries'))
    )
    op.create_index('ix_deliveries_pending', 'deliveries', ['subscriber_id', 'signal_id'], unique=False, postgresql_where=sa.text('done_at IS NULL'))
    op.create_index(op.f('ix_deliveries_signal_id'), 'deliveries', ['signal_id'], unique=False)

    op.create_table('stage_weak_acks',
    sa.Column('run_id', sa.Text(), nullable=False),
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('label', sa.Text(), nullable=False),
    sa.Column('headers', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    prefixes=['UNLOGGED']
    )
    op.create_index(op.f('ix_stage_weak_acks_run_id'), 'stage_weak_acks', ['run_id'], unique=False)
    # Staging rows never outlive a run, so the new columns need no default.
    op.execute('TRUNCATE stage_check_acks')
    op.add_column('stage_check_acks', sa.Column('custom_weak', sa.Boolean(), nullable=False))
    op.add_column('stage_check_acks', sa.Column('declared', sa.Boolean(), nullable=False))


def downgrade() -> None:
    op.drop_column('stage_check_acks', 'declared')
    op.drop_column('stage_check_acks', 'custom_weak')
    op.drop_index(op.f('ix_stage_weak_acks_run_id'), table_name='stage_weak_acks')
    op.drop_table('stage_weak_acks')
    op.drop_index(op.f('ix_deliveries_signal_id'), table_name='deliveries')
    op.drop_index('ix_deliveries_pending', table_name='deliveries', postgresql_where=sa.text('done_at IS NULL'))
    op.drop_table('deliveries')
    op.drop_column('subscribers', 'event_position')
