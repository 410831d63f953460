"""an operator's first day: one meaning per number, bounded metric labels, connectors seen

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-01 09:00:00

Issue 50 (decisions #127, #128). The metrics' sources are bounded: the API's, the CLI's and the first
connections claimed (``metric_sources``, read through a new index on the claims) have series of
their own, every other source's figures go to 'other' — the seal rolls them up so, and a scrape
folds what came after. Built-in acks late for their attempt are counted as ``report late-acks``
lists them (``late_builtin_acks``, over ``builtin_fact_times``): a fact after its decision is
looked for among the decisions that did not count a built-in label (``counted_in_time``,
``awaits_builtin_facts``) — this interval's, and those sealed before whose facts were still to
come (``metric_awaited_facts``, kept by the seal; started here, and the late built-in acks the
seals so far would have counted added to the totals). The
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

revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None

# Created here, in creation order (each uses only those before it), with their signatures.
NEW = {
    "metric_sources": "metric_sources(integer)",
    "builtin_fact_times": "builtin_fact_times(bigint)",
    "counted_in_time": "counted_in_time(jsonb, smallint, text)",
    "awaits_builtin_facts": "awaits_builtin_facts(jsonb, smallint)",
    "late_builtin_acks": "late_builtin_acks(bigint)",
    "connector_seen": "connector_seen(text, timestamptz)",
    "report_dead_letters": "report_dead_letters(timestamptz, timestamptz, text)",
}
# Replaced here: the version before is restored by the downgrade.
REPLACED = ("metric_facts", "ledger_gauges", "connection_metrics")
RENAMED_METRICS = (("signals_received", "signals_stored"),)

# What the seals so far would have counted and kept, had they known of late built-in acks: the
# attempts decided without a built-in label whose facts may still come, and the late built-in acks
# whose decision and fact are both sealed (added to the totals per source; a scrape folds them).
AWAITED_SO_FAR = """
INSERT INTO metric_awaited_facts (signal_id, attempt)
SELECT r.signal_id, r.attempt FROM request_results r
WHERE r.seq <= sealed_upto() AND awaits_builtin_facts(r.ack_statuses, r.status)"""
LATE_SO_FAR = """
INSERT INTO metric_totals (metric, source, label, detail, value)
SELECT 'late_acks', s.source, '', '', count(*)::float8
FROM metric_awaited_facts w
CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = w.signal_id LIMIT 1) s
CROSS JOIN LATERAL late_builtin_acks(w.signal_id) l
WHERE l.attempt = w.attempt AND GREATEST(l.decided_seq, l.fact_seq) <= sealed_upto()
GROUP BY s.source
ON CONFLICT (metric, source, label, detail) DO UPDATE SET value = metric_totals.value + EXCLUDED.value"""
# … and those whose facts can no longer come after the last seal (the seal's forget_awaited_facts,
# as of this revision).
FORGOTTEN_SO_FAR = """
DELETE FROM metric_awaited_facts w
WHERE NOT EXISTS (
    SELECT FROM attempts a CROSS JOIN LATERAL unnest(a.requested_acks) AS q(label)
    WHERE a.signal_id = w.signal_id AND a.attempt = w.attempt
      AND q.label IN (twin_persisted(), search_persisted())
      AND NOT EXISTS (SELECT FROM builtin_fact_times(w.signal_id) f WHERE f.label = q.label AND f.seq <= sealed_upto())
      AND NOT EXISTS (SELECT FROM command_responses r WHERE r.signal_id = w.signal_id AND r.seq <= sealed_upto()
                        AND (r.event_id IS NULL OR r.is_error)))"""


def upgrade() -> None:
    op.execute("ALTER TABLE connections ADD COLUMN seen_at timestamptz, ADD COLUMN broker_out_since timestamptz")
    op.execute("CREATE INDEX ix_connections_claimed_at ON connections (claimed_at, id)")
    op.execute("""
CREATE TABLE metric_awaited_facts (
    signal_id bigint NOT NULL, attempt integer NOT NULL,
    CONSTRAINT pk_metric_awaited_facts PRIMARY KEY (signal_id, attempt))""")
    bind = op.get_bind()
    for name in (*NEW, *REPLACED):
        objects.create(bind, name, revision)
    for old, new in RENAMED_METRICS:
        op.execute(f"UPDATE metric_totals SET metric = '{new}' WHERE metric = '{old}'")
    op.execute(AWAITED_SO_FAR)
    op.execute(LATE_SO_FAR)
    op.execute(FORGOTTEN_SO_FAR)
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute(load(objects.GRANTS)["definers"])
    if roles_exist():
        op.execute(f"GRANT EXECUTE ON FUNCTION {NEW['connector_seen']} TO ackstore_ingest")
        op.execute("GRANT SELECT (id, claimed_at) ON connections TO ackstore_pipeline")
        op.execute("GRANT SELECT, INSERT, DELETE ON metric_awaited_facts TO ackstore_pipeline")
        op.execute("GRANT SELECT ON metric_awaited_facts TO ackstore_reporter")


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
    op.execute("DROP TABLE metric_awaited_facts")
    op.execute("DROP INDEX ix_connections_claimed_at")
    op.execute("ALTER TABLE connections DROP COLUMN broker_out_since, DROP COLUMN seen_at")
