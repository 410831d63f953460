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
* The validation gate reads its slice where it lies: each result carries the sweep batch that
  decided it, the gate passes batches up to a watermark (``validated_results``; the view
  ``awaiting_validation()`` is what lies past it), so ``queue_validate`` and the ``stage_check_*``
  copies go. A built-in fact's disposition is one function, ``builtin_disposition``.

What an old ledger holds is moved without changing any answer: each distinct response time
becomes a ``migrated`` batch (an event keeps its time), events move onto their responses, and
the built-in acks already stored stay rows (only facts of later batches are derived); results the
gate had passed are in a migrated batch at the watermark, those waiting for it in a later one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from ackstore.ledger import objects
from migrations.roles import READERS, owned_by_admin, roles_exist

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

# The views and functions this revision creates, in the order they depend on each other (their SQL:
# ackstore/ledger/sql/objects/, as of this revision), and the report views it replaces.
VIEWS = ("request_attempts", "current_attempts", "thing_events", "command_facts", "builtin_facts", "builtin_acks",
         "request_acks")
FUNCTIONS = ("builtin_disposition", "awaiting_validation", "ack_entry")
REPLACED_VIEWS = ("report_qos1_audit", "report_settlement_status")
FUNCTION_SIGNATURES = {
    "builtin_disposition": "builtin_disposition(timestamptz, timestamptz, timestamptz, timestamptz, text, timestamptz)",
    "awaiting_validation": "awaiting_validation()",
    "ack_entry": "ack_entry(integer, jsonb, jsonb, boolean, text)",
}


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
# Each result's sweep batch: those the gate had passed one migrated batch (the watermark), those
# waiting in queue_validate a later one.
MIGRATE_RESULTS = """
WITH passed AS (
    INSERT INTO ledger_batches (step, committed_at)
    SELECT 'migrated', now() WHERE EXISTS (SELECT 1 FROM request_results) RETURNING id
)
UPDATE request_results SET batch_id = (SELECT id FROM passed);
INSERT INTO pipeline_watermarks (name, position)
SELECT 'validated_results', COALESCE(max(batch_id), 0) FROM request_results;
WITH waiting AS (
    INSERT INTO ledger_batches (step, committed_at)
    SELECT 'migrated', now() WHERE EXISTS (SELECT 1 FROM queue_validate) RETURNING id
)
UPDATE request_results r SET batch_id = (SELECT id FROM waiting)
FROM queue_validate q WHERE q.signal_id = r.signal_id AND q.attempt = r.attempt
"""
RESTORE_VALIDATION_QUEUE = """
INSERT INTO queue_validate (signal_id, attempt)
SELECT v.signal_id, v.attempt FROM awaiting_validation() v;
DELETE FROM pipeline_watermarks WHERE name = 'validated_results'
"""

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
    op.add_column("request_results", sa.Column("batch_id", sa.BigInteger(), nullable=True))
    op.execute(MIGRATE_RESULTS)
    op.alter_column("request_results", "batch_id", nullable=False)
    op.create_index("ix_request_results_batch_id", "request_results", ["batch_id"], postgresql_using="brin")
    for name in (*FUNCTIONS, *VIEWS, *REPLACED_VIEWS):
        objects.create(op.get_bind(), name, revision)
    for table in ("queue_validate", *CHECK_TABLES):
        op.drop_table(table)  # the gate reads its slice where it lies
    if roles_exist():
        for table in ("ledger_batches", "search_marks"):
            owned_by_admin("TABLE", table)
        for view in VIEWS:
            owned_by_admin("VIEW", view)
            op.execute(f"GRANT SELECT ON {view} TO {', '.join(READERS)}")
        op.execute("GRANT SELECT, INSERT ON ledger_batches, search_marks TO ackstore_pipeline")
        op.execute("GRANT USAGE ON SEQUENCE ledger_batches_id_seq TO ackstore_pipeline")  # a batch's id, taken first
        op.execute("GRANT SELECT ON pipeline_watermarks TO ackstore_reporter")  # awaiting_validation() reads it


def downgrade() -> None:
    _decided_queue("queue_validate")
    op.execute(RESTORE_VALIDATION_QUEUE)
    for name in REPLACED_VIEWS:
        objects.create(op.get_bind(), name, down_revision)
    _restore_check_tables()
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
    op.add_column("command_responses", sa.Column("responded_at", postgresql.TIMESTAMP(timezone=True),
                                                 server_default=sa.text("now()"), nullable=False))
    op.execute(RESPONSE_TIMES)
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name if name != 'thing_events' else 'thing_events_view'}")
    for signature in FUNCTION_SIGNATURES.values():
        op.execute(f"DROP FUNCTION {signature}")
    op.drop_index("ix_request_results_batch_id", table_name="request_results", postgresql_using="brin")
    op.drop_column("request_results", "batch_id")
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
    if roles_exist():
        for table in ("ack_requests", "thing_events"):
            owned_by_admin("TABLE", table)
        op.execute("GRANT INSERT ON ack_requests TO ackstore_ingest")
        op.execute("GRANT SELECT ON thing_events TO ackstore_ingest")
        op.execute("GRANT SELECT, INSERT ON thing_events TO ackstore_pipeline")
        op.execute("REVOKE SELECT ON pipeline_watermarks FROM ackstore_reporter")
        op.execute("GRANT SELECT, INSERT, DELETE ON queue_validate TO ackstore_pipeline")
        op.execute(f"GRANT SELECT, INSERT, TRUNCATE ON {', '.join(CHECK_TABLES)} TO ackstore_pipeline")
        for table in ("queue_validate", *CHECK_TABLES):
            owned_by_admin("TABLE", table)


# --- what the gate used before it read its slice where it lies (0003, 0004), for the downgrade ---

CHECK_TABLES = ("stage_check_results", "stage_check_acks", "stage_check_settlements")


def _decided_queue(name: str) -> None:
    op.create_table(
        name,
        sa.Column("signal_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("signal_id", "attempt", name=op.f(f"pk_{name}")),
    )


def _staging(name: str, *columns: sa.Column) -> None:
    op.create_table(name, sa.Column("run_id", sa.Text(), nullable=False), *columns, prefixes=["UNLOGGED"])


def _restore_check_tables() -> None:
    _staging("stage_check_results",
             sa.Column("signal_id", sa.BigInteger(), nullable=False),
             sa.Column("attempt", sa.Integer(), nullable=False),
             sa.Column("cause", sa.Text(), nullable=False),
             sa.Column("status", sa.SmallInteger(), nullable=False),
             sa.Column("decided_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
             sa.Column("deadline_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
             sa.Column("requested", sa.Integer(), nullable=False),
             sa.Column("counted_in_time", sa.Integer(), nullable=False),
             sa.Column("response_is_error", sa.Boolean(), nullable=False),
             sa.Column("aggregated", sa.Boolean(), nullable=False),
             sa.Column("body_entries", sa.Integer(), nullable=True),
             sa.Column("body_keys", sa.Integer(), nullable=True),
             sa.Column("combined_status", sa.Integer(), nullable=True))
    _staging("stage_check_acks",
             sa.Column("ack_id", sa.BigInteger(), nullable=False),
             sa.Column("signal_id", sa.BigInteger(), nullable=False),
             sa.Column("attempt", sa.Integer(), nullable=False),
             sa.Column("label", sa.Text(), nullable=False),
             sa.Column("status", sa.SmallInteger(), nullable=False),
             sa.Column("weak", sa.Boolean(), nullable=False),
             sa.Column("weak_header", sa.Boolean(), nullable=False),
             sa.Column("requested", sa.Boolean(), nullable=False),
             sa.Column("response_success", sa.Boolean(), nullable=True),
             sa.Column("event_exists", sa.Boolean(), nullable=True),
             sa.Column("custom_weak", sa.Boolean(), nullable=False),
             sa.Column("declared", sa.Boolean(), nullable=False))
    _staging("stage_check_settlements",
             sa.Column("settlement_id", sa.BigInteger(), nullable=False),
             sa.Column("signal_id", sa.BigInteger(), nullable=False),
             sa.Column("attempt", sa.Integer(), nullable=False),
             sa.Column("source", sa.Text(), nullable=False),
             sa.Column("api", sa.Text(), nullable=False),
             sa.Column("decided", sa.Boolean(), nullable=False))
