"""the ledger's metrics: counters the seals roll up, gauges read by keys

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 07:00:00

Issue 38 (decisions #108). ``metric_totals`` holds the counters of the facts the seals cover:
each seal adds its interval's (``metric_facts``) in its own transaction, so a scrape of
``ackstore metrics`` reads the totals, the facts after the last seal and the open queues — never
the history. Here the totals start as those of the sealed facts still in the hot tables (what
earlier archives moved out was never counted: those counters start lower, and only go up).
``pipeline_runs`` gets an index by step for each step's last run.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement
from migrations.roles import roles_exist

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None

NEW = ("status_class", "latency_buckets", "latency_bucket", "metric_facts", "ledger_counters", "ledger_gauges")
NEW_FUNCTIONS = ("metric_facts(bigint, bigint)", "latency_bucket(float8)", "latency_buckets()",
                 "status_class(smallint)")

# The totals of the sealed facts still hot: what the seals so far would have rolled up.
SEALED_SO_FAR = """
INSERT INTO metric_totals (metric, source, label, detail, value)
SELECT f.metric, f.source, f.label, f.detail, f.value FROM metric_facts(0, sealed_upto()) f"""


def upgrade() -> None:
    op.execute("""
CREATE TABLE metric_totals (
    metric text NOT NULL, source text NOT NULL, label text NOT NULL, detail text NOT NULL,
    value double precision NOT NULL,
    CONSTRAINT pk_metric_totals PRIMARY KEY (metric, source, label, detail))""")
    op.execute("CREATE INDEX ix_pipeline_runs_step_id ON pipeline_runs (step, id)")
    bind = op.get_bind()
    for name in NEW:
        objects.create(bind, name, revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute(SEALED_SO_FAR)
    if roles_exist():
        op.execute("GRANT SELECT, INSERT, UPDATE ON metric_totals TO ackstore_pipeline")
        op.execute("GRANT SELECT ON ledger_counters, ledger_gauges TO ackstore_reporter")


def downgrade() -> None:
    op.execute("DROP VIEW ledger_gauges")
    op.execute("DROP VIEW ledger_counters")
    for signature in NEW_FUNCTIONS:
        op.execute(f"DROP FUNCTION {signature}")
    op.execute("DROP INDEX ix_pipeline_runs_step_id")
    op.execute("DROP TABLE metric_totals")
