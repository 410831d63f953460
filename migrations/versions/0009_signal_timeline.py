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

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

READERS = ("ackstore_ingest", "ackstore_pipeline", "ackstore_reporter")

# A frozen copy of schema.REPORT_VIEWS["signal_timeline"] as of this revision (a migration must not
# follow the module); tests/test_migrations.py compares them.
SIGNAL_TIMELINE = """
SELECT t.signal_id, t.attempt, t.at, t.stage, t.checkpoint, t.label, t.status, t.detail
FROM (
    SELECT s.id AS signal_id, 1 AS attempt, s.received_at AS at, 1 AS stage, 'received'::text AS checkpoint,
           NULL::text AS label, NULL::integer AS status,
           'from ' || s.source || ', message ' || s.source_message_id AS detail
    FROM signals s
    UNION ALL
    SELECT a.signal_id, a.attempt, a.opened_at, 2, 'attempt opened', NULL, NULL,
           'requested ' || COALESCE(NULLIF(array_to_string(a.requested_acks, ', '), ''), 'nothing')
           || '; deadline ' || to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
    FROM attempts a
    UNION ALL
    SELECT r.signal_id, NULL, b.committed_at, 3, 'applied', NULL, r.status,
           CASE WHEN r.event_action IS NOT NULL THEN r.event_action || ', revision ' || r.revision
                WHEN r.is_error THEN 'failed' ELSE 'nothing changed' END
    FROM command_responses r
    JOIN ledger_batches b ON b.id = r.batch_id
    UNION ALL
    SELECT f.signal_id, NULL, f.indexed_at, 4, 'indexed', NULL, f.indexed_status,
           CASE WHEN f.indexed_weak THEN 'the index already held this state' END
    FROM command_facts f
    WHERE f.indexed_at IS NOT NULL
    UNION ALL
    SELECT k.signal_id, k.attempt, k.received_at, 5, 'ack', k.label, k.status,
           k.disposition || CASE WHEN k.weak THEN ', weak' ELSE '' END || ', from ' || k.issuer
    FROM request_acks k
    UNION ALL
    SELECT r.signal_id, r.attempt, r.decided_at, 6, 'decided', NULL, r.status, 'by ' || r.cause
    FROM request_results r
    UNION ALL
    SELECT r.signal_id, r.attempt, p.passed_at, 7, 'validated', NULL, NULL,
           CASE WHEN p.run_id IS NULL THEN 'at the latest: passes before migration 0009 were not timed' END
    FROM request_results r
    CROSS JOIN LATERAL (SELECT v.passed_at, v.run_id FROM validation_passes v WHERE v.results_upto >= r.batch_id
                        ORDER BY v.results_upto LIMIT 1) p
    UNION ALL
    SELECT st.signal_id, st.attempt, st.decided_at, 8, 'settlement decided', NULL, NULL, st.decision
    FROM settlements st
    UNION ALL
    SELECT st.signal_id, st.attempt, st.carried_out_at, 9, 'carried out', NULL, NULL, st.decision
    FROM settlements st
    WHERE st.carried_out_at IS NOT NULL
) t
"""


def _owned_by_admin(kind: str, name: str) -> None:
    """New objects belong to the admin role, as 0006 made every object (when its user may)."""
    op.execute(f"""
DO $$ BEGIN
  IF pg_has_role(current_user, 'ackstore_admin', 'MEMBER') THEN ALTER {kind} {name} OWNER TO ackstore_admin; END IF;
END $$""")


def _roles_exist() -> bool:
    found = op.get_bind().exec_driver_sql(
        "SELECT count(*) FROM pg_roles WHERE rolname = ANY (%(r)s)", {"r": [*READERS, "ackstore_admin"]})
    return found.scalar_one() == len(READERS) + 1


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
    op.execute(f"CREATE VIEW signal_timeline AS {SIGNAL_TIMELINE}")
    if _roles_exist():
        _owned_by_admin("TABLE", "validation_passes")
        _owned_by_admin("VIEW", "signal_timeline")
        op.execute("GRANT SELECT, INSERT ON validation_passes TO ackstore_pipeline")
        op.execute("GRANT SELECT ON signal_timeline TO ackstore_reporter")


def downgrade() -> None:
    op.execute("DROP VIEW signal_timeline")
    op.drop_index("ix_acks_signal_id", "acks")
    op.drop_table("validation_passes")
