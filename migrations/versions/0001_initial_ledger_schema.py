"""initial ledger schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-22 03:22:48.297410
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('declared_labels',
    sa.Column('label', sa.Text(), nullable=False),
    sa.Column('holder', sa.Text(), nullable=False),
    sa.Column('declared_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('label', name=op.f('pk_declared_labels'))
    )
    op.create_index(op.f('ix_declared_labels_holder'), 'declared_labels', ['holder'], unique=False)
    op.create_table('pipeline_runs',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('run_id', sa.Text(), nullable=False),
    sa.Column('step', sa.Text(), nullable=False),
    sa.Column('started_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('finished_at', postgresql.TIMESTAMP(timezone=True), nullable=True),
    sa.Column('stats', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pipeline_runs')),
    sa.UniqueConstraint('run_id', 'step', name=op.f('uq_pipeline_runs_run_id_step'))
    )
    op.create_table('search_index',
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('value_type', sa.Text(), nullable=False),
    sa.Column('value_text', sa.Text(), nullable=True),
    sa.Column('value_number', sa.Numeric(), nullable=True),
    sa.Column('value_bool', sa.Boolean(), nullable=True),
    sa.Column('revision', sa.BigInteger(), nullable=False),
    sa.CheckConstraint("value_type IN ('string', 'number', 'boolean', 'null', 'object', 'array')", name=op.f('ck_search_index_type')),
    sa.PrimaryKeyConstraint('thing_id', 'path', 'ordinal', name=op.f('pk_search_index'))
    )
    op.create_table('signals',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('source_message_id', sa.Text(), nullable=False),
    sa.Column('correlation_id', sa.Text(), nullable=False),
    sa.Column('api', sa.Text(), nullable=False),
    sa.Column('channel', sa.Text(), nullable=False),
    sa.Column('kind', sa.Text(), nullable=False),
    sa.Column('action', sa.Text(), nullable=False),
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('topic', sa.Text(), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('value', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('headers', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('requested_acks', postgresql.ARRAY(sa.Text()), nullable=False),
    sa.Column('response_required', sa.Boolean(), nullable=False),
    sa.Column('timeout_ms', sa.BigInteger(), nullable=False),
    sa.Column('received_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('deadline_at', postgresql.TIMESTAMP(timezone=True), nullable=False),
    sa.Column('state', sa.Text(), server_default=sa.text("'received'"), nullable=False),
    sa.CheckConstraint("api IN ('http', 'websocket', 'connectivity')", name=op.f('ck_signals_api')),
    sa.CheckConstraint("channel IN ('twin', 'live')", name=op.f('ck_signals_channel')),
    sa.CheckConstraint("kind IN ('twin-command', 'live-command', 'live-message')", name=op.f('ck_signals_kind')),
    sa.CheckConstraint("source <> '' AND source_message_id <> '' AND correlation_id <> ''", name=op.f('ck_signals_ids')),
    sa.CheckConstraint("state IN ('received', 'persisted', 'failed', 'decided', 'settled')", name=op.f('ck_signals_state')),
    sa.CheckConstraint('deadline_at >= received_at', name=op.f('ck_signals_deadline')),
    sa.CheckConstraint('timeout_ms >= 0', name=op.f('ck_signals_timeout')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_signals')),
    sa.UniqueConstraint('correlation_id', name=op.f('uq_signals_correlation_id')),
    sa.UniqueConstraint('source', 'source_message_id', name=op.f('uq_signals_source_source_message_id'))
    )
    op.create_index(op.f('ix_signals_state_deadline_at'), 'signals', ['state', 'deadline_at'], unique=False)
    op.create_index(op.f('ix_signals_thing_id_id'), 'signals', ['thing_id', 'id'], unique=False)
    op.create_table('subscribers',
    sa.Column('id', sa.Text(), nullable=False),
    sa.Column('holder', sa.Text(), nullable=False),
    sa.Column('connection_id', sa.Text(), nullable=True),
    sa.Column('filter', sa.Text(), nullable=True),
    sa.Column('namespaces', postgresql.ARRAY(sa.Text()), nullable=True),
    sa.Column('channels', postgresql.ARRAY(sa.Text()), nullable=False),
    sa.Column('declared_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.CheckConstraint("cardinality(channels) > 0 AND channels <@ ARRAY['twin', 'live']::text[]", name=op.f('ck_subscribers_channels')),
    sa.CheckConstraint("id <> ''", name=op.f('ck_subscribers_id')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_subscribers'))
    )
    op.create_index(op.f('ix_subscribers_holder'), 'subscribers', ['holder'], unique=False)
    op.create_table('things',
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('revision', sa.BigInteger(), nullable=False),
    sa.Column('document', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('deleted', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('updated_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.CheckConstraint('revision > 0', name=op.f('ck_things_revision')),
    sa.PrimaryKeyConstraint('thing_id', name=op.f('pk_things'))
    )
    op.create_table('ack_requests',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('label', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_ack_requests_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('signal_id', 'label', name=op.f('pk_ack_requests'))
    )
    op.create_table('acks',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('label', sa.Text(), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('payload', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('headers', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('issuer', sa.Text(), nullable=False),
    sa.Column('weak', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('received_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('disposition', sa.Text(), nullable=False),
    sa.CheckConstraint("disposition IN ('counted', 'duplicate', 'late', 'unrequested')", name=op.f('ck_acks_disposition')),
    sa.CheckConstraint('status BETWEEN 100 AND 599', name=op.f('ck_acks_status')),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_acks_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_acks'))
    )
    op.create_index('uq_acks_counted_signal_label', 'acks', ['signal_id', 'label'], unique=True, postgresql_where=sa.text("disposition = 'counted'"))
    op.create_table('command_responses',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('payload', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('is_error', sa.Boolean(), nullable=False),
    sa.Column('responded_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.CheckConstraint('status BETWEEN 100 AND 599', name=op.f('ck_command_responses_status')),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_command_responses_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('signal_id', name=op.f('pk_command_responses'))
    )
    op.create_table('request_results',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('body', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('headers', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('cause', sa.Text(), nullable=False),
    sa.Column('decided_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.CheckConstraint("cause IN ('acks', 'deadline', 'error', 'response', 'accepted')", name=op.f('ck_request_results_cause')),
    sa.CheckConstraint('status BETWEEN 100 AND 599', name=op.f('ck_request_results_status')),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_request_results_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('signal_id', name=op.f('pk_request_results'))
    )
    op.create_table('settlements',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('decision', sa.Text(), nullable=False),
    sa.Column('attempt', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('decided_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('carried_out_at', postgresql.TIMESTAMP(timezone=True), nullable=True),
    sa.CheckConstraint("decision IN ('ack', 'reject', 'redeliver', 'dead-letter')", name=op.f('ck_settlements_decision')),
    sa.CheckConstraint('attempt > 0', name=op.f('ck_settlements_attempt')),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_settlements_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('signal_id', name=op.f('pk_settlements'))
    )
    op.create_table('thing_events',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('revision', sa.BigInteger(), nullable=False),
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('action', sa.Text(), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('value', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('headers', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('created_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.CheckConstraint("action IN ('created', 'modified', 'merged', 'deleted')", name=op.f('ck_thing_events_action')),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_thing_events_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_thing_events')),
    sa.UniqueConstraint('signal_id', name=op.f('uq_thing_events_signal_id')),
    sa.UniqueConstraint('thing_id', 'revision', name=op.f('uq_thing_events_thing_id_revision'))
    )


def downgrade() -> None:
    op.drop_table('thing_events')
    op.drop_table('settlements')
    op.drop_table('request_results')
    op.drop_table('command_responses')
    op.drop_index('uq_acks_counted_signal_label', table_name='acks', postgresql_where=sa.text("disposition = 'counted'"))
    op.drop_table('acks')
    op.drop_table('ack_requests')
    op.drop_table('things')
    op.drop_index(op.f('ix_subscribers_holder'), table_name='subscribers')
    op.drop_table('subscribers')
    op.drop_index(op.f('ix_signals_thing_id_id'), table_name='signals')
    op.drop_index(op.f('ix_signals_state_deadline_at'), table_name='signals')
    op.drop_table('signals')
    op.drop_table('search_index')
    op.drop_table('pipeline_runs')
    op.drop_index(op.f('ix_declared_labels_holder'), table_name='declared_labels')
    op.drop_table('declared_labels')
