"""work queues, attempts, settlement per attempt, the validation slice tables

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 10:45:59

Every step now finds its work in a queue that holds only pending work (architecture.md,
"Growth"): ``queue_apply``, ``queue_index``, ``queue_decide``, ``queue_validate`` and
``queue_settle``. Results, acks and settlements are kept per attempt (A.2.10).
The queues are filled from the existing ledger, so pending work survives the upgrade.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from ackstore.ledger import objects

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


# The report views this revision creates (ackstore/ledger/sql/objects/, as of this revision).
VIEWS = ("report_settlement_status", "report_qos1_audit")


def _staging(name: str, *columns: sa.Column) -> None:
    op.create_table(name, sa.Column('run_id', sa.Text(), nullable=False), *columns, prefixes=['UNLOGGED'])


def _decided_queue(name: str) -> None:
    op.create_table(name,
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['signal_id', 'attempt'], ['request_results.signal_id', 'request_results.attempt'], name=op.f(f'fk_{name}_signal_id_request_results'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('signal_id', 'attempt', name=op.f(f'pk_{name}'))
    )


def upgrade() -> None:
    # --- attempts (A.2.10): results and acks per attempt --------------------------------------
    op.create_table('attempts',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('requested_acks', postgresql.ARRAY(sa.Text()), nullable=False),
    sa.Column('opened_at', postgresql.TIMESTAMP(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('deadline_at', postgresql.TIMESTAMP(timezone=True), nullable=False),
    sa.CheckConstraint('attempt >= 2', name=op.f('ck_attempts_attempt')),
    sa.CheckConstraint('deadline_at >= opened_at', name=op.f('ck_attempts_deadline')),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_attempts_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('signal_id', 'attempt', name=op.f('pk_attempts'))
    )
    op.add_column('acks', sa.Column('attempt', sa.Integer(), server_default=sa.text('1'), nullable=False))
    op.create_check_constraint(op.f('ck_acks_attempt'), 'acks', 'attempt > 0')
    op.drop_index('uq_acks_counted_signal_label', table_name='acks')
    op.create_index('uq_acks_counted_signal_attempt_label', 'acks', ['signal_id', 'attempt', 'label'], unique=True, postgresql_where=sa.text("disposition = 'counted'"))

    op.add_column('request_results', sa.Column('attempt', sa.Integer(), server_default=sa.text('1'), nullable=False))
    op.add_column('request_results', sa.Column('ack_statuses', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False))
    op.create_check_constraint(op.f('ck_request_results_attempt'), 'request_results', 'attempt > 0')
    op.drop_constraint('pk_request_results', 'request_results', type_='primary')
    op.create_primary_key('pk_request_results', 'request_results', ['signal_id', 'attempt'])

    # A settlement belongs to a decided attempt: the database says so, not only the gate.
    op.execute('DELETE FROM settlements s WHERE NOT EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = s.signal_id)')
    op.alter_column('settlements', 'attempt', server_default=None)
    op.add_column('settlements', sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False))
    op.create_unique_constraint(op.f('uq_settlements_id'), 'settlements', ['id'])
    op.drop_constraint('fk_settlements_signal_id_signals', 'settlements', type_='foreignkey')
    op.drop_constraint('pk_settlements', 'settlements', type_='primary')
    op.create_primary_key('pk_settlements', 'settlements', ['signal_id', 'attempt'])
    op.create_foreign_key(op.f('fk_settlements_signal_id_request_results'), 'settlements', 'request_results', ['signal_id', 'attempt'], ['signal_id', 'attempt'], ondelete='CASCADE')
    op.create_index('ix_settlements_not_carried_out', 'settlements', ['signal_id'], unique=False, postgresql_where=sa.text('carried_out_at IS NULL'))

    # --- work queues, filled with the work pending now ----------------------------------------
    op.create_table('queue_apply',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_queue_apply_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('signal_id', name=op.f('pk_queue_apply'))
    )
    op.create_table('queue_index',
    sa.Column('thing_id', sa.Text(), nullable=False),
    sa.Column('revision', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('thing_id', name=op.f('pk_queue_index'))
    )
    op.create_table('queue_decide',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.ForeignKeyConstraint(['signal_id'], ['signals.id'], name=op.f('fk_queue_decide_signal_id_signals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('signal_id', name=op.f('pk_queue_decide'))
    )
    _decided_queue('queue_validate')
    _decided_queue('queue_settle')
    op.create_table('pipeline_watermarks',
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_pipeline_watermarks'))
    )
    op.execute("""INSERT INTO queue_apply (signal_id)
                  SELECT s.id FROM signals s WHERE s.kind = 'twin-command'
                  AND NOT EXISTS (SELECT 1 FROM command_responses r WHERE r.signal_id = s.id)""")
    op.execute("""INSERT INTO queue_index (thing_id, revision)
                  SELECT t.thing_id, t.revision FROM things t LEFT JOIN search_things w ON w.thing_id = t.thing_id
                  WHERE w.thing_id IS NULL OR w.revision < t.revision""")
    op.execute("""INSERT INTO queue_decide (signal_id, attempt)
                  SELECT s.id, 1 FROM signals s
                  WHERE NOT EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = s.id)""")
    # Results decided before the gate existed count as validated; settlements written so far too.
    op.execute("INSERT INTO pipeline_watermarks (name, position) SELECT 'validated_settlements', COALESCE(max(id), 0) FROM settlements")

    # --- staging ---------------------------------------------------------------------------
    op.add_column('stage_results', sa.Column('attempt', sa.Integer(), nullable=False))
    op.add_column('stage_results', sa.Column('ack_statuses', postgresql.JSONB(astext_type=sa.Text()), nullable=False))
    _staging('stage_settlements',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('decision', sa.Text(), nullable=True),
    )
    op.create_index(op.f('ix_stage_settlements_run_id'), 'stage_settlements', ['run_id'], unique=False)
    _staging('stage_check_results',
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('cause', sa.Text(), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('decided_at', postgresql.TIMESTAMP(timezone=True), nullable=False),
    sa.Column('deadline_at', postgresql.TIMESTAMP(timezone=True), nullable=False),
    sa.Column('requested', sa.Integer(), nullable=False),
    sa.Column('counted_in_time', sa.Integer(), nullable=False),
    sa.Column('response_is_error', sa.Boolean(), nullable=False),
    sa.Column('aggregated', sa.Boolean(), nullable=False),
    sa.Column('body_entries', sa.Integer(), nullable=True),
    sa.Column('body_keys', sa.Integer(), nullable=True),
    sa.Column('combined_status', sa.Integer(), nullable=True),
    )
    _staging('stage_check_acks',
    sa.Column('ack_id', sa.BigInteger(), nullable=False),
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('label', sa.Text(), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('weak', sa.Boolean(), nullable=False),
    sa.Column('weak_header', sa.Boolean(), nullable=False),
    sa.Column('requested', sa.Boolean(), nullable=False),
    sa.Column('response_success', sa.Boolean(), nullable=True),
    sa.Column('event_exists', sa.Boolean(), nullable=True),
    )
    _staging('stage_check_settlements',
    sa.Column('settlement_id', sa.BigInteger(), nullable=False),
    sa.Column('signal_id', sa.BigInteger(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('api', sa.Text(), nullable=False),
    sa.Column('decided', sa.Boolean(), nullable=False),
    )

    # --- report views ------------------------------------------------------------------------
    for view in VIEWS:
        objects.create(op.get_bind(), view, revision)


def downgrade() -> None:
    for view in VIEWS:
        op.execute(f'DROP VIEW IF EXISTS "{view}"')
    for table in ('stage_check_settlements', 'stage_check_acks', 'stage_check_results', 'stage_settlements',
                  'pipeline_watermarks', 'queue_settle', 'queue_validate', 'queue_decide', 'queue_index', 'queue_apply'):
        op.drop_table(table)
    op.drop_column('stage_results', 'ack_statuses')
    op.drop_column('stage_results', 'attempt')
    op.drop_index('ix_settlements_not_carried_out', table_name='settlements')
    op.drop_constraint('fk_settlements_signal_id_request_results', 'settlements', type_='foreignkey')
    op.execute('DELETE FROM settlements WHERE attempt > 1')
    op.drop_constraint('pk_settlements', 'settlements', type_='primary')
    op.create_primary_key('pk_settlements', 'settlements', ['signal_id'])
    op.create_foreign_key('fk_settlements_signal_id_signals', 'settlements', 'signals', ['signal_id'], ['id'], ondelete='CASCADE')
    op.drop_constraint('uq_settlements_id', 'settlements', type_='unique')
    op.drop_column('settlements', 'id')
    op.alter_column('settlements', 'attempt', server_default=sa.text('1'))
    op.execute('DELETE FROM request_results WHERE attempt > 1')
    op.drop_constraint('pk_request_results', 'request_results', type_='primary')
    op.create_primary_key('pk_request_results', 'request_results', ['signal_id'])
    op.drop_constraint(op.f('ck_request_results_attempt'), 'request_results', type_='check')
    op.drop_column('request_results', 'ack_statuses')
    op.drop_column('request_results', 'attempt')
    op.drop_index('uq_acks_counted_signal_attempt_label', table_name='acks')
    op.execute("DELETE FROM acks WHERE attempt > 1")
    op.create_index('uq_acks_counted_signal_label', 'acks', ['signal_id', 'label'], unique=True, postgresql_where=sa.text("disposition = 'counted'"))
    op.drop_constraint(op.f('ck_acks_attempt'), 'acks', type_='check')
    op.drop_column('acks', 'attempt')
    op.drop_table('attempts')
