"""the lean ledger: facts, not copies

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 13:10:00

* No foreign key on the hot append-only children of ``signals`` (acks, command responses,
  results, the event log, the work queues) nor from settlements and queues to results: each
  inserted row took a row lock on its parent for the check (≈ 510 MB of WAL per million). The
  merges' own joins keep them whole, and the validation gate finds orphans in its slice.
* ``ack_requests`` goes: a request's labels are in its signal and its attempts.
* Every attempt is one named thing: ``request_attempts`` (attempt 1 is the signal itself, a
  later one a row of ``attempts``) and ``current_attempts`` (each signal's newest attempt). Every
  statement that needs an attempt's labels or deadline reads them there.
* Built-in acks are derived from the facts that make them true (view ``builtin_acks``):
  ``twin-persisted`` from the command's persisted response, ``search-persisted`` from the
  ``search_marks`` row (one per thing per index batch) that covers the command's revision; their
  fact time is the commit of the batch that wrote the fact (``ledger_batches``, one row per merge).
* The event log is a view over the response (which gains the event's position, revision and
  action) and its command; ``command_responses.responded_at`` is its batch's time.

What an old ledger holds is moved without changing any answer: each distinct response time
becomes a ``migrated`` batch (an event keeps its time), events move onto their responses, and
the built-in acks already stored stay rows (only facts of later batches are derived).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

# (table, constraint, columns, referred table, referred columns), as 0001-0003 created them.
FOREIGN_KEYS = (
    ("acks", "fk_acks_signal_id_signals", ["signal_id"], "signals", ["id"]),
    ("command_responses", "fk_command_responses_signal_id_signals", ["signal_id"], "signals", ["id"]),
    ("request_results", "fk_request_results_signal_id_signals", ["signal_id"], "signals", ["id"]),
    ("thing_events", "fk_thing_events_signal_id_signals", ["signal_id"], "signals", ["id"]),
    ("queue_apply", "fk_queue_apply_signal_id_signals", ["signal_id"], "signals", ["id"]),
    ("queue_decide", "fk_queue_decide_signal_id_signals", ["signal_id"], "signals", ["id"]),
    ("settlements", "fk_settlements_signal_id_request_results", ["signal_id", "attempt"], "request_results",
     ["signal_id", "attempt"]),
    ("queue_validate", "fk_queue_validate_signal_id_request_results", ["signal_id", "attempt"], "request_results",
     ["signal_id", "attempt"]),
    ("queue_settle", "fk_queue_settle_signal_id_request_results", ["signal_id", "attempt"], "request_results",
     ["signal_id", "attempt"]),
)

# Frozen copies of schema.LEDGER_VIEWS and REPORT_VIEWS as of this revision (a migration must not
# follow the module); tests/test_migrations.py compares PostgreSQL's rendering of both.
VIEWS = {  # in the order they depend on each other
    "request_attempts": """
SELECT s.id AS signal_id, 1 AS attempt, s.requested_acks, s.received_at AS opened_at, s.deadline_at
FROM signals s
UNION ALL
SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at
FROM attempts a
""",
    "current_attempts": """
SELECT r.signal_id, r.attempt, r.requested_acks, r.opened_at, r.deadline_at
FROM request_attempts r
WHERE NOT EXISTS (SELECT 1 FROM attempts later WHERE later.signal_id = r.signal_id AND later.attempt > r.attempt)
""",
    "thing_events": """
SELECT r.event_id AS id, s.thing_id, r.revision, r.signal_id, r.event_action AS action, s.path,
       CASE WHEN r.event_action = 'deleted' THEN NULL ELSE s.value END AS value,
       s.headers || jsonb_build_object('requested-acks', to_jsonb(ARRAY(
           SELECT u.label FROM unnest(s.requested_acks) WITH ORDINALITY AS u(label, n)
           WHERE u.label <> ALL (ARRAY['twin-persisted', 'search-persisted', 'live-response']) ORDER BY u.n))) AS headers,
       b.committed_at AS created_at
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN ledger_batches b ON b.id = r.batch_id
WHERE r.event_id IS NOT NULL
""",
    "command_facts": """
SELECT r.signal_id,
       CASE WHEN rb.step = 'apply_twin' THEN rb.committed_at END AS persisted_at, r.status AS persisted_status,
       r.payload AS persisted_payload,
       mb.committed_at AS indexed_at, CASE WHEN m.changed THEN 204 ELSE 200 END AS indexed_status,
       CASE WHEN NOT m.changed
            THEN to_jsonb('The search index already held this state of the thing: nothing needed writing.'::text)
       END AS indexed_payload,
       NOT m.changed AS indexed_weak
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN ledger_batches rb ON rb.id = r.batch_id
LEFT JOIN search_marks m ON m.thing_id = s.thing_id AND m.from_revision < r.revision AND r.revision <= m.to_revision
LEFT JOIN ledger_batches mb ON mb.id = m.batch_id
WHERE r.event_id IS NOT NULL
""",
    "builtin_facts": """
SELECT c.signal_id, f.label, f.status, f.payload, f.weak, f.fact_at
FROM command_facts c
CROSS JOIN LATERAL (VALUES
    ('twin-persisted'::text, c.persisted_status, c.persisted_payload, false, c.persisted_at),
    ('search-persisted'::text, c.indexed_status, c.indexed_payload, c.indexed_weak, c.indexed_at)
) AS f(label, status, payload, weak, fact_at)
WHERE f.fact_at IS NOT NULL
""",
    "builtin_acks": """
SELECT f.signal_id, a.attempt, f.label, f.status, f.payload,
       jsonb_build_object('correlation-id', s.correlation_id)
           || CASE WHEN f.weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END AS headers,
       'ackstore'::text AS issuer, f.weak, f.fact_at AS received_at,
       CASE WHEN f.fact_at < a.opened_at THEN 'counted'
            WHEN r.decided_at < f.fact_at OR (r.cause IN ('deadline', 'error') AND f.fact_at > a.deadline_at)
            THEN 'late'
            ELSE 'counted' END AS disposition
FROM builtin_facts f
JOIN signals s ON s.id = f.signal_id
JOIN request_attempts a ON a.signal_id = f.signal_id AND f.label = ANY (a.requested_acks)
LEFT JOIN request_results r ON r.signal_id = a.signal_id AND r.attempt = a.attempt
WHERE NOT EXISTS (SELECT 1 FROM attempts later
                  WHERE later.signal_id = a.signal_id AND later.attempt = a.attempt + 1
                    AND later.opened_at <= f.fact_at)
""",
    "request_acks": """
SELECT k.id, k.signal_id, k.attempt, k.label, k.status, k.payload, k.headers, k.issuer, k.weak, k.received_at,
       k.disposition, k.reason
FROM acks k
UNION ALL
SELECT NULL::bigint, b.signal_id, b.attempt, b.label, b.status, b.payload, b.headers, b.issuer, b.weak,
       b.received_at, b.disposition, NULL::text
FROM builtin_acks b
""",
}
# A frozen copy of schema.LEDGER_FUNCTIONS as of this revision.
ACK_ENTRY = """
CREATE FUNCTION ack_entry(status integer, payload jsonb, headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE AS $$
SELECT jsonb_build_object('status', status)
       || CASE WHEN payload IS NOT NULL THEN jsonb_build_object('payload', payload) ELSE '{}'::jsonb END
       || jsonb_build_object('headers',
              CASE WHEN headers ->> 'content-type' = 'application/vnd.eclipse.ditto+json'
                   THEN headers - 'requested-acks' - 'content-type' ELSE headers - 'requested-acks' END
              || jsonb_build_object('correlation-id', correlation_id)
              || CASE WHEN weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END)
$$"""

QOS1_AUDIT = """
SELECT signal_id, correlation_id, source, source_message_id, attempt, stuck_at, detail,
       received_at, now() - received_at AS age
FROM (
    SELECT DISTINCT ON (w.signal_id) w.signal_id, s.correlation_id, s.source, s.source_message_id,
           w.attempt, w.stuck_at, w.detail, s.received_at
    FROM (
        SELECT q.signal_id, 1 AS attempt, 1 AS stage, 'apply: the twin change is not persisted yet'::text AS stuck_at,
               NULL::text AS detail
        FROM queue_apply q
        UNION ALL
        SELECT q.signal_id, q.attempt, 2, 'decide: waiting for acks or the deadline',
               'missing: ' || COALESCE((
                   SELECT string_agg(l.label, ', ' ORDER BY l.n)
                   FROM unnest(a.requested_acks) WITH ORDINALITY AS l(label, n)
                   WHERE NOT EXISTS (SELECT 1 FROM request_acks k
                                     WHERE k.signal_id = q.signal_id AND k.attempt = q.attempt
                                       AND k.label = l.label AND k.disposition = 'counted')), 'nothing')
               || '; deadline ' || to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
        FROM queue_decide q
        JOIN request_attempts a ON a.signal_id = q.signal_id AND a.attempt = q.attempt
        UNION ALL
        SELECT q.signal_id, q.attempt, 3, 'validate: decided, waiting for the validation gate', NULL
        FROM queue_validate q
        JOIN signals s ON s.id = q.signal_id
        WHERE s.api = 'connectivity' AND s.source NOT IN ('api', 'cli')
        UNION ALL
        SELECT q.signal_id, q.attempt, 4, 'settle: validated, waiting for a settlement decision', NULL
        FROM queue_settle q
        UNION ALL
        SELECT st.signal_id, st.attempt, 5, 'connector: decided, not carried out yet', st.decision
        FROM settlements st
        WHERE st.carried_out_at IS NULL
    ) w
    JOIN signals s ON s.id = w.signal_id
    ORDER BY w.signal_id, w.stage
) stuck
ORDER BY received_at, signal_id
"""
QOS1_AUDIT_0006 = QOS1_AUDIT.replace("FROM request_acks k", "FROM acks k").replace(
    "FROM unnest(a.requested_acks)", "FROM unnest(COALESCE(a.requested_acks, s.requested_acks))"
).replace(
    "to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'",
    "to_char(COALESCE(a.deadline_at, s.deadline_at) AT TIME ZONE 'UTC',\n"
    "                                           'YYYY-MM-DD HH24:MI:SS') || ' UTC'",
).replace(
    "        JOIN request_attempts a ON a.signal_id = q.signal_id AND a.attempt = q.attempt\n",
    "        JOIN signals s ON s.id = q.signal_id\n"
    "        LEFT JOIN attempts a ON a.signal_id = q.signal_id AND a.attempt = q.attempt\n",
)

READERS = ("ackstore_ingest", "ackstore_pipeline", "ackstore_reporter")


def _roles_exist() -> bool:
    found = op.get_bind().exec_driver_sql(
        "SELECT count(*) FROM pg_roles WHERE rolname = ANY (%(r)s)", {"r": [*READERS, "ackstore_admin"]})
    return found.scalar_one() == len(READERS) + 1


def _owned_by_admin(kind: str, name: str) -> None:
    """New objects belong to the admin role, as 0006 made every object (when its user may)."""
    op.execute(f"""
DO $$ BEGIN
  IF pg_has_role(current_user, 'ackstore_admin', 'MEMBER') THEN ALTER {kind} {name} OWNER TO ackstore_admin; END IF;
END $$""")


EVENT_ACTIONS = "event_action IN ('created', 'modified', 'merged', 'deleted')"

# Each response's batch: a migrated one per distinct time (an event's own time when it has one).
MIGRATE_RESPONSES = """
CREATE TEMP TABLE migrated_times ON COMMIT DROP AS
SELECT DISTINCT COALESCE(e.created_at, r.responded_at) AS at
FROM command_responses r JOIN signals s ON s.id = r.signal_id
LEFT JOIN thing_events e ON e.signal_id = r.signal_id
WHERE s.kind = 'twin-command';
INSERT INTO ledger_batches (step, committed_at) SELECT 'migrated', t.at FROM migrated_times t ORDER BY t.at;
UPDATE command_responses r
SET batch_id = b.id, event_id = e.id, revision = e.revision, event_action = e.action
FROM signals s
LEFT JOIN thing_events e ON e.signal_id = s.id
JOIN ledger_batches b ON b.step = 'migrated'
WHERE s.id = r.signal_id AND s.kind = 'twin-command'
  AND b.committed_at = COALESCE(e.created_at, r.responded_at)
"""

# Back to stored rows: the derived built-in acks become acks, the events a table again.
RESTORE_EVENTS = """
INSERT INTO thing_events (id, thing_id, revision, signal_id, action, path, value, headers, created_at)
SELECT e.id, e.thing_id, e.revision, e.signal_id, e.action, e.path, e.value, e.headers, e.created_at
FROM thing_events_view e
"""
RESTORE_ACKS = """
INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, disposition)
SELECT b.signal_id, b.attempt, b.label, b.status, b.payload, b.headers, b.issuer, b.weak, b.received_at, b.disposition
FROM builtin_acks b
ORDER BY b.received_at, b.signal_id, b.attempt, b.label
"""
RESPONSE_TIMES = """
UPDATE command_responses r
SET responded_at = COALESCE(
    (SELECT b.committed_at FROM ledger_batches b WHERE b.id = r.batch_id),
    (SELECT min(k.received_at) FROM acks k WHERE k.signal_id = r.signal_id AND k.label = 'live-response'
                                               AND k.disposition = 'counted'),
    now())
"""


def upgrade() -> None:
    for table, name, _, _, _ in FOREIGN_KEYS:
        op.drop_constraint(name, table, type_="foreignkey")
    op.drop_table("ack_requests")
    op.create_table(
        "ledger_batches",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("step", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.Column("committed_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.CheckConstraint("step IN ('apply_twin', 'index_search', 'sweep', 'migrated')",
                           name=op.f("ck_ledger_batches_step")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_batches")),
    )
    for column in (sa.Column("batch_id", sa.BigInteger(), nullable=True),
                   sa.Column("event_id", sa.BigInteger(), nullable=True),
                   sa.Column("revision", sa.BigInteger(), nullable=True),
                   sa.Column("event_action", sa.Text(), nullable=True)):
        op.add_column("command_responses", column)
    op.execute(MIGRATE_RESPONSES)
    op.drop_column("command_responses", "responded_at")
    op.create_check_constraint(
        op.f("ck_command_responses_event"), "command_responses",
        "(event_id IS NULL) = (revision IS NULL) AND (event_id IS NULL) = (event_action IS NULL)")
    op.create_check_constraint(op.f("ck_command_responses_action"), "command_responses", EVENT_ACTIONS)
    op.create_index("uq_command_responses_event_id", "command_responses", ["event_id"], unique=True,
                    postgresql_where=sa.text("event_id IS NOT NULL"))
    op.create_index("ix_command_responses_batch_id", "command_responses", ["batch_id"], postgresql_using="brin")
    op.drop_table("thing_events")
    op.create_table(
        "search_marks",
        sa.Column("thing_id", sa.Text(), nullable=False),
        sa.Column("from_revision", sa.BigInteger(), nullable=False),
        sa.Column("to_revision", sa.BigInteger(), nullable=False),
        sa.Column("batch_id", sa.BigInteger(), nullable=False),
        sa.Column("changed", sa.Boolean(), nullable=False),
        sa.CheckConstraint("to_revision > from_revision AND from_revision >= 0",
                           name=op.f("ck_search_marks_revisions")),
        sa.PrimaryKeyConstraint("thing_id", "to_revision", name=op.f("pk_search_marks")),
    )
    op.alter_column("stage_check_acks", "ack_id", nullable=True)  # a derived built-in ack has none
    for name, query in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {query}")
    op.execute(ACK_ENTRY)
    op.execute(f"CREATE OR REPLACE VIEW report_qos1_audit AS {QOS1_AUDIT}")
    if _roles_exist():
        for table in ("ledger_batches", "search_marks"):
            _owned_by_admin("TABLE", table)
        for view in VIEWS:
            _owned_by_admin("VIEW", view)
            op.execute(f"GRANT SELECT ON {view} TO {', '.join(READERS)}")
        op.execute("GRANT SELECT, INSERT ON ledger_batches, search_marks TO ackstore_pipeline")
        op.execute("GRANT USAGE ON SEQUENCE ledger_batches_id_seq TO ackstore_pipeline")  # a batch's id, taken first


def downgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW report_qos1_audit AS {QOS1_AUDIT_0006}")
    op.execute("ALTER VIEW thing_events RENAME TO thing_events_view")
    op.create_table(
        "thing_events",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("thing_id", sa.Text(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("signal_id", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("headers", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", postgresql.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("action IN ('created', 'modified', 'merged', 'deleted')", name=op.f("ck_thing_events_action")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_thing_events")),
        sa.UniqueConstraint("signal_id", name=op.f("uq_thing_events_signal_id")),
        sa.UniqueConstraint("thing_id", "revision", name=op.f("uq_thing_events_thing_id_revision")),
    )
    op.execute(RESTORE_EVENTS)
    op.execute("SELECT setval(pg_get_serial_sequence('thing_events', 'id'), "
               "GREATEST((SELECT max(id) FROM thing_events), 1))")
    op.execute(RESTORE_ACKS)
    op.execute("DELETE FROM stage_check_acks WHERE ack_id IS NULL")
    op.alter_column("stage_check_acks", "ack_id", nullable=False)
    op.add_column("command_responses", sa.Column("responded_at", postgresql.TIMESTAMP(timezone=True),
                                                 server_default=sa.text("now()"), nullable=False))
    op.execute(RESPONSE_TIMES)
    op.execute("DROP FUNCTION ack_entry(integer, jsonb, jsonb, boolean, text)")
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name if name != 'thing_events' else 'thing_events_view'}")
    op.drop_table("search_marks")
    op.drop_index("ix_command_responses_batch_id", table_name="command_responses", postgresql_using="brin")
    op.drop_index("uq_command_responses_event_id", table_name="command_responses",
                  postgresql_where=sa.text("event_id IS NOT NULL"))
    op.drop_constraint(op.f("ck_command_responses_action"), "command_responses", type_="check")
    op.drop_constraint(op.f("ck_command_responses_event"), "command_responses", type_="check")
    for column in ("event_action", "revision", "event_id", "batch_id"):
        op.drop_column("command_responses", column)
    op.drop_table("ledger_batches")
    op.create_table(
        "ack_requests",
        sa.Column("signal_id", sa.BigInteger(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["signal_id"], ["signals.id"], name=op.f("fk_ack_requests_signal_id_signals"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("signal_id", "label", name=op.f("pk_ack_requests")),
    )
    op.execute("INSERT INTO ack_requests (signal_id, label) "
               "SELECT s.id, l.label FROM signals s CROSS JOIN LATERAL unnest(s.requested_acks) AS l(label) "
               "ON CONFLICT DO NOTHING")
    for table, name, columns, referred, referred_columns in FOREIGN_KEYS:
        op.create_foreign_key(name, table, referred, columns, referred_columns, ondelete="CASCADE")
    if _roles_exist():
        for table in ("ack_requests", "thing_events"):
            _owned_by_admin("TABLE", table)
        op.execute("GRANT INSERT ON ack_requests TO ackstore_ingest")
        op.execute("GRANT SELECT ON thing_events TO ackstore_ingest")
        op.execute("GRANT SELECT, INSERT ON thing_events TO ackstore_pipeline")
