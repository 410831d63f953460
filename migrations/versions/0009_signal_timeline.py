"""every signal's timeline: the gate's passes are timed; the view signal_timeline

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 12:00:00

* ``validation_passes``: one row per pass of the validation gate that passed results (the last
  sweep batch passed, when, which run) — a row per run, none per signal. What had passed before
  is one row at the watermark, timed now and without a run.
* ``signal_timeline``: every checkpoint of every signal with its time (A.3), read per signal;
  ``ix_acks_signal_id`` so that a signal's acks are read by its key.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ackstore.ledger import objects
from migrations.roles import owned_by_admin, roles_exist

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "validation_passes",
        sa.Column("results_upto", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.Column("passed_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("results_upto", name=op.f("pk_validation_passes")),
    )
    op.execute("INSERT INTO validation_passes (results_upto) "
               "SELECT w.position FROM pipeline_watermarks w WHERE w.name = 'validated_results' AND w.position > 0")
    # A signal's acks by its key (show and the timeline read them; before, only the counted and
    # the invalid ones had an index of their own).
    op.create_index("ix_acks_signal_id", "acks", ["signal_id", "attempt"])
    objects.create(op.get_bind(), "signal_timeline", revision)  # ackstore/ledger/sql/objects/
    if roles_exist():
        owned_by_admin("TABLE", "validation_passes")
        owned_by_admin("VIEW", "signal_timeline")
        op.execute("GRANT SELECT, INSERT ON validation_passes TO ackstore_pipeline")
        op.execute("GRANT SELECT ON signal_timeline TO ackstore_reporter")


def downgrade() -> None:
    op.execute("DROP VIEW signal_timeline")
    op.drop_index("ix_acks_signal_id", "acks")
    op.drop_table("validation_passes")
