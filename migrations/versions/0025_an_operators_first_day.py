"""an operator's first day: one meaning per number, bounded metric labels, connectors seen

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-01 09:00:00

Issue 50 (decisions #127, #128). The metrics' sources are bounded: the API's, the CLI's and the first
connections claimed (``metric_sources``, read through a new index on the claims) have series of
their own, every other source's figures go to 'other' — the seal rolls them up so, and a scrape
folds what came after. Built-in acks late for their attempt are counted as ``report late-acks``
lists them (``late_builtin_acks``, over ``builtin_fact_times``): a fact after its decision is
looked for from the new facts among the decisions that did not count a built-in label
(``counted_in_time``, ``awaits_builtin_facts``) — this interval's, and those sealed before whose
facts may still come (``metric_awaited_facts``, probed by signal and thing, kept by the seal while
``builtin_facts_to_come``; started here). The late built-in acks the seals so far would have
counted are added to the totals, each source past the first ``ACKSTORE_METRIC_SOURCES``
connections as ``other``, as a seal adds them; the downgrade subtracts the late built-in acks
sealed by then — the upgrade's, and the seals' since — so the totals are 0024's again (with the
same setting, and nothing archived meanwhile). ``record_latest_carried_out`` returns what it
recorded, with the decisions. The
counter ``signals_received`` is ``signals_stored`` (what ``ackstore connection metrics`` calls
``stored``), its totals renamed. A connector says it runs (``connector_seen``: the connection's
``seen_at`` and ``broker_out_since``), and that it stopped cleanly (``connector_stopped``:
``stopped_at``), which ``ledger_gauges`` serves with the signals pending in any queue.
``connection_metrics`` names its measures as every other surface does (``received``,
``carried_out_ack`` …). ``report_dead_letters`` lists what the dead-letter alert counts.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement, load
from ackstore.rules.settings import Settings
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
    "builtin_facts_to_come": "builtin_facts_to_come(bigint, integer, bigint)",
    "connector_seen": "connector_seen(text, timestamptz)",
    "connector_stopped": "connector_stopped(text)",
    "report_dead_letters": "report_dead_letters(timestamptz, timestamptz, text)",
}
# Replaced here: the version before is restored by the downgrade.
REPLACED = ("metric_facts", "ledger_gauges", "connection_metrics")
# Replaced with another result type, so dropped first (CREATE OR REPLACE cannot change it); each
# a write function the ingest role calls.
RETYPED = {"record_latest_carried_out": "record_latest_carried_out(bigint[])"}
RENAMED_METRICS = (("signals_received", "signals_stored"),)

# The late built-in acks the seals so far would have counted (metric_facts: each with whichever
# of its decision and its fact is numbered last, both sealed), per source — a source past the
# first :cap connections claimed as 'other', as the seal rolls it up (decisions #127).
LATE_SO_FAR = """
SELECT COALESCE(k.source, 'other') AS source, count(*)::float8 AS n
FROM request_results r
CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = r.signal_id LIMIT 1) s
CROSS JOIN LATERAL late_builtin_acks(r.signal_id) l
LEFT JOIN metric_sources(:cap) k ON k.source = s.source
WHERE r.seq <= sealed_upto() AND (judged_by_deadline(r.cause) OR awaits_builtin_facts(r.ack_statuses, r.status))
  AND l.attempt = r.attempt AND GREATEST(l.decided_seq, l.fact_seq) <= sealed_upto()
GROUP BY 1"""
ADD_LATE = f"""
INSERT INTO metric_totals (metric, source, label, detail, value)
SELECT 'late_acks', late.source, '', '', late.n FROM ({LATE_SO_FAR}) late
ON CONFLICT (metric, source, label, detail) DO UPDATE SET value = metric_totals.value + EXCLUDED.value"""
SUBTRACT_LATE = f"""
UPDATE metric_totals t SET value = t.value - late.n FROM ({LATE_SO_FAR}) late
WHERE t.metric = 'late_acks' AND t.source = late.source AND t.label = '' AND t.detail = ''"""
# A count the roll-up writes is 1 at least: a late_acks total of 0 is one the upgrade made.
NO_LATE = "DELETE FROM metric_totals WHERE metric = 'late_acks' AND value = 0"
# The sealed decisions whose built-in facts may still come, as the seal keeps them (await_facts).
AWAITED_SO_FAR = """
INSERT INTO metric_awaited_facts (signal_id, attempt, thing_id)
SELECT r.signal_id, r.attempt, s.thing_id FROM request_results r JOIN signals s ON s.id = r.signal_id
WHERE r.seq <= sealed_upto() AND awaits_builtin_facts(r.ack_statuses, r.status)
  AND EXISTS (SELECT FROM builtin_facts_to_come(r.signal_id, r.attempt, sealed_upto()))"""
RENAME_METRIC = "UPDATE metric_totals SET metric = :new WHERE metric = :old"


def upgrade() -> None:
    op.execute("ALTER TABLE connections ADD COLUMN seen_at timestamptz, ADD COLUMN broker_out_since timestamptz, "
               "ADD COLUMN stopped_at timestamptz")
    op.execute("CREATE INDEX ix_connections_claimed_at ON connections (claimed_at, id)")
    op.execute("""
CREATE TABLE metric_awaited_facts (
    signal_id bigint NOT NULL, attempt integer NOT NULL, thing_id text NOT NULL,
    CONSTRAINT pk_metric_awaited_facts PRIMARY KEY (signal_id, attempt))""")
    op.execute("CREATE INDEX ix_metric_awaited_facts_thing_id ON metric_awaited_facts (thing_id)")
    bind = op.get_bind()
    for signature in RETYPED.values():
        op.execute(f"DROP FUNCTION {signature}")
    for name in (*NEW, *REPLACED, *RETYPED):
        objects.create(bind, name, revision)
    for old, new in RENAMED_METRICS:
        bind.execute(text(RENAME_METRIC), {"old": old, "new": new})
    bind.execute(text(ADD_LATE), {"cap": _cap()})
    op.execute(AWAITED_SO_FAR)
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute(load(objects.GRANTS)["definers"])
    if roles_exist():
        op.execute(f"GRANT EXECUTE ON FUNCTION {NEW['connector_seen']}, {NEW['connector_stopped']} TO ackstore_ingest")
        _grant_retyped()
        op.execute("GRANT SELECT (id, claimed_at) ON connections TO ackstore_pipeline")
        op.execute("GRANT SELECT, INSERT, DELETE ON metric_awaited_facts TO ackstore_pipeline")
        op.execute("GRANT SELECT ON metric_awaited_facts TO ackstore_reporter")


def downgrade() -> None:
    bind = op.get_bind()
    bind.execute(text(SUBTRACT_LATE), {"cap": _cap()})  # before the functions it reads go
    op.execute(NO_LATE)
    if roles_exist():
        op.execute("REVOKE SELECT (id, claimed_at) ON connections FROM ackstore_pipeline")
    for old, new in RENAMED_METRICS:
        bind.execute(text(RENAME_METRIC), {"old": new, "new": old})
    for name in REPLACED:
        objects.create(bind, name, down_revision)
    for name, signature in RETYPED.items():
        op.execute(f"DROP FUNCTION {signature}")
        objects.create(bind, name, down_revision)
        op.execute(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC")
    if roles_exist():
        _grant_retyped()
    for signature in reversed(NEW.values()):
        op.execute(f"DROP FUNCTION {signature}")
    op.execute("DROP TABLE metric_awaited_facts")
    op.execute("DROP INDEX ix_connections_claimed_at")
    op.execute("ALTER TABLE connections DROP COLUMN stopped_at, DROP COLUMN broker_out_since, DROP COLUMN seen_at")


def _cap() -> int:
    """How many connections have series of their own: the seal's setting (ACKSTORE_METRIC_SOURCES)."""
    return Settings.from_env().metric_sources


def _grant_retyped() -> None:
    for signature in RETYPED.values():
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO ackstore_ingest")
