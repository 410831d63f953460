"""an operator's first day: one meaning per number, bounded metric labels, connectors seen

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-01 09:00:00

Issue 50 (decisions #D1, #D2). The metrics' sources are bounded: the API's, the CLI's and the first
connections claimed (``metric_sources``, read through a new index on the claims) have series of
their own, every other source's figures go to 'other' — the seal rolls them up so, and a scrape
folds what came after. Built-in acks late for their attempt are counted as ``report late-acks``
lists them (``late_builtin_acks``, over ``builtin_fact_times`` and ``marked_commands``); the
counter ``signals_received`` is ``signals_stored`` (what ``ackstore connection metrics`` calls
``stored``), its totals renamed. A connector says it runs (``connector_seen``: the connection's
``seen_at`` and ``broker_out_since``), which ``ledger_gauges`` serves with the signals pending in
any queue. ``connection_metrics`` names its measures as every other surface does (``received``,
``carried_out_ack`` …). ``report_dead_letters`` lists what the dead-letter alert counts.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement, load
from migrations.roles import roles_exist

revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None

# Created here, in creation order (each uses only those before it), with their signatures.
NEW = {
    "metric_sources": "metric_sources(integer)",
    "builtin_fact_times": "builtin_fact_times(bigint)",
    "counted_in_time": "counted_in_time(jsonb, smallint, text)",
    "late_builtin_acks": "late_builtin_acks(bigint)",
    "marked_commands": "marked_commands(text, bigint, bigint)",
    "connector_seen": "connector_seen(text, timestamptz)",
    "report_dead_letters": "report_dead_letters(timestamptz, timestamptz, text)",
}
# Replaced here: the version before is restored by the downgrade.
REPLACED = ("metric_facts", "ledger_gauges", "connection_metrics")
RENAMED_METRICS = (("signals_received", "signals_stored"),)


def upgrade() -> None:
    op.execute("ALTER TABLE connections ADD COLUMN seen_at timestamptz, ADD COLUMN broker_out_since timestamptz")
    op.execute("CREATE INDEX ix_connections_claimed_at ON connections (claimed_at, id)")
    bind = op.get_bind()
    for name in (*NEW, *REPLACED):
        objects.create(bind, name, revision)
    for old, new in RENAMED_METRICS:
        op.execute(f"UPDATE metric_totals SET metric = '{new}' WHERE metric = '{old}'")
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute(load(objects.GRANTS)["definers"])
    if roles_exist():
        op.execute(f"GRANT EXECUTE ON FUNCTION {NEW['connector_seen']} TO ackstore_ingest")
        op.execute("GRANT SELECT (id, claimed_at) ON connections TO ackstore_pipeline")


def downgrade() -> None:
    if roles_exist():
        op.execute("REVOKE SELECT (id, claimed_at) ON connections FROM ackstore_pipeline")
    for old, new in RENAMED_METRICS:
        op.execute(f"UPDATE metric_totals SET metric = '{old}' WHERE metric = '{new}'")
    bind = op.get_bind()
    for name in REPLACED:
        objects.create(bind, name, down_revision)
    for signature in reversed(NEW.values()):
        op.execute(f"DROP FUNCTION {signature}")
    op.execute("DROP INDEX ix_connections_claimed_at")
    op.execute("ALTER TABLE connections DROP COLUMN broker_out_since, DROP COLUMN seen_at")
