"""pipeline staging tables, the search index watermark and typed search rows

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 03:46:16.907941
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Signals become immutable: each checkpoint is a row elsewhere, and the pipeline no longer
    # rewrites a wide signal row (and its indexes) twice per request.
    op.drop_column('signals', 'state')  # drops its CHECK and its index with it
    op.create_table('search_things',
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('namespace', sa.Text(), nullable=False),
    sa.Column('revision', sa.BigInteger(), nullable=False),
    sa.Column('digest', sa.Text(), nullable=False),
    sa.Column('present', sa.Boolean(), nullable=False),
    sa.Column('indexed_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('thing_id', name=op.f('pk_search_things'))
    )
    op.create_index(op.f('ix_search_things_namespace'), 'search_things', ['namespace'], unique=False)
    op.create_table('stage_results',
    sa.Column('run_id', sa.Text(), nullable=False),
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('body', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('headers', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('cause', sa.Text(), nullable=False),
    sa.Column('acks_seen', sa.Integer(), nullable=False),
    prefixes=['UNLOGGED']
    )
    op.create_index(op.f('ix_stage_results_run_id'), 'stage_results', ['run_id'], unique=False)
    op.create_table('stage_search_rows',
    sa.Column('run_id', sa.Text(), nullable=False),
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('value_type', sa.Text(), nullable=False),
    sa.Column('value_text', sa.Text(), nullable=True),
    sa.Column('value_number', sa.Text(), nullable=True),
    sa.Column('value_bool', sa.Boolean(), nullable=True),
    sa.Column('empty', sa.Boolean(), nullable=False),
    sa.Column('revision', sa.BigInteger(), nullable=False),
    prefixes=['UNLOGGED']
    )
    op.create_index(op.f('ix_stage_search_rows_run_id'), 'stage_search_rows', ['run_id'], unique=False)
    op.create_table('stage_search_things',
    sa.Column('run_id', sa.Text(), nullable=False),
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('namespace', sa.Text(), nullable=False),
    sa.Column('old_revision', sa.BigInteger(), nullable=False),
    sa.Column('revision', sa.BigInteger(), nullable=False),
    sa.Column('digest', sa.Text(), nullable=False),
    sa.Column('present', sa.Boolean(), nullable=False),
    sa.Column('changed', sa.Boolean(), nullable=False),
    prefixes=['UNLOGGED']
    )
    op.create_index(op.f('ix_stage_search_things_run_id'), 'stage_search_things', ['run_id'], unique=False)
    op.create_table('stage_twin_outcomes',
    sa.Column('run_id', sa.Text(), nullable=False),
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('base_revision', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('payload', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('is_error', sa.Boolean(), nullable=False),
    sa.Column('event_action', sa.Text(), nullable=True),
    sa.Column('revision', sa.BigInteger(), nullable=True),
    sa.Column('is_last', sa.Boolean(), nullable=False),
    sa.Column('final_revision', sa.BigInteger(), nullable=True),
    sa.Column('final_document', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    prefixes=['UNLOGGED']
    )
    op.create_index(op.f('ix_stage_twin_outcomes_run_id'), 'stage_twin_outcomes', ['run_id'], unique=False)
    # Existing rows (none were written before 0002) would get false; the default is dropped at once.
    op.add_column('search_index', sa.Column('empty', sa.Boolean(), nullable=False, server_default=sa.false()))
    op.alter_column('search_index', 'empty', server_default=None)
    op.alter_column('search_index', 'ordinal', server_default=None)
    op.create_index(op.f('ix_search_index_path_value_number'), 'search_index', ['path', 'value_number'], unique=False)
    op.create_index(op.f('ix_search_index_path_value_text'), 'search_index', ['path', 'value_text'], unique=False)


def downgrade() -> None:
    op.add_column('signals', sa.Column('state', sa.Text(), server_default=sa.text("'received'"), nullable=False))
    op.create_check_constraint(
        op.f('ck_signals_state'), 'signals', "state IN ('received', 'persisted', 'failed', 'decided', 'settled')"
    )
    op.create_index(op.f('ix_signals_state_deadline_at'), 'signals', ['state', 'deadline_at'], unique=False)
    op.drop_index(op.f('ix_search_index_path_value_text'), table_name='search_index')
    op.drop_index(op.f('ix_search_index_path_value_number'), table_name='search_index')
    op.alter_column('search_index', 'ordinal', server_default=sa.text('0'))
    op.drop_column('search_index', 'empty')
    op.drop_index(op.f('ix_stage_twin_outcomes_run_id'), table_name='stage_twin_outcomes')
    op.drop_table('stage_twin_outcomes')
    op.drop_index(op.f('ix_stage_search_things_run_id'), table_name='stage_search_things')
    op.drop_table('stage_search_things')
    op.drop_index(op.f('ix_stage_search_rows_run_id'), table_name='stage_search_rows')
    op.drop_table('stage_search_rows')
    op.drop_index(op.f('ix_stage_results_run_id'), table_name='stage_results')
    op.drop_table('stage_results')
    op.drop_index(op.f('ix_search_things_namespace'), table_name='search_things')
    op.drop_table('search_things')
