"""each component writes through its own functions; what no role may do, the database refuses

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25 20:30:00

Issue 26: a login of the ingest role could forge what the pipeline decides (a 500 response for a
pending twin command, a counted ``twin-persisted`` ack with status 500, a settlement carried out
before its decision or cleared), and the pipeline's could rewrite any column of an ack.

* The ingest role (submit, declare, ack, respond, pull, the connector) loses every INSERT, UPDATE
  and DELETE on the ledger's tables; it writes through SECURITY DEFINER functions owned by the
  admin role, with their search_path pinned, that check what a caller could forge
  (``sql/objects/intake.sql``, ``answering.sql``, ``pulling.sql``, ``declaring.sql``,
  ``carrying_out.sql``). The bulk path COPYs into ``stage_signals`` (UNLOGGED; the role may fill
  every column but the batch key, its transaction's id) and ``merge_staged_signals`` moves that
  transaction's rows into ``signals``.
* Who a subscriber is (decisions #97): ``subscribers.owner_login``, the login that declared it
  first; only that login may declare, pull, ack or respond as it (``act_for``, ``may_act_for``).
  A subscriber declared before has none until an admin gives it one.
* ``settlements_carried_out_once``: a settlement's decision never changes, and it is carried out
  once, never cleared; a CHECK keeps ``carried_out_at`` at or after ``decided_at``.
* ``acks_builtin_only_carried``: a ``twin-persisted`` or ``search-persisted`` ack row may only
  carry a pre-lean-ledger row of its signal to a later attempt; built-in facts are derived.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement
from migrations.roles import roles_exist

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None

STAGE_SIGNALS = """
CREATE UNLOGGED TABLE stage_signals (
    batch bigint DEFAULT txid_current() NOT NULL,
    ord integer NOT NULL,
    source text NOT NULL, source_message_id text NOT NULL, correlation_id text NOT NULL, api text NOT NULL,
    channel text NOT NULL, kind text NOT NULL, action text NOT NULL, thing_id text NOT NULL, topic text NOT NULL,
    path text NOT NULL, value jsonb, headers jsonb NOT NULL, requested_acks text[] NOT NULL,
    response_required boolean NOT NULL, timeout_ms bigint NOT NULL)
"""
FUNCTIONS = ("may_act_for", "act_for", "merge_staged_signals", "insert_signal", "hand_out_live",
             "lock_retransmitted",
             "retransmitted", "open_next_attempt", "lock_request", "store_ack", "store_live_response",
             "lock_handout", "answer_handout", "close_handout", "close_decided_handouts", "lease_ready",
             "lock_event_position", "move_event_position", "hand_out_events", "close_handouts",
             "declare_subscriber", "record_carried_out", "record_latest_carried_out")
TRIGGERS = (("settlements_keep_their_decision", "settlements_carried_out_once", "settlements"),  # function, trigger, table
            ("builtin_acks_only_carried", "acks_builtin_only_carried", "acks"))
INGEST_BEFORE = """
GRANT SELECT, INSERT ON signals, attempts, acks, command_responses TO ackstore_ingest;
GRANT UPDATE (received_at) ON signals TO ackstore_ingest;
GRANT INSERT ON queue_apply TO ackstore_ingest;
GRANT SELECT, INSERT, UPDATE ON queue_decide, subscribers, deliveries TO ackstore_ingest;
GRANT SELECT, INSERT, DELETE ON declared_labels TO ackstore_ingest;
GRANT UPDATE (carried_out_at) ON settlements TO ackstore_ingest
"""

# What the ingest role holds from here on (objects/grants.sql, as of this migration).
INGEST_AFTER = """
GRANT SELECT ON signals, attempts, acks, command_responses, subscribers, declared_labels, deliveries, settlements,
                request_results, search_index, search_things TO ackstore_ingest;
GRANT INSERT (ord, source, api, source_message_id, correlation_id, channel, kind, action, thing_id, topic, path,
              headers, value, requested_acks, response_required, timeout_ms) ON stage_signals TO ackstore_ingest;
GRANT SELECT ON current_attempts, thing_events, command_facts, builtin_facts, builtin_acks, request_acks,
                request_answers TO ackstore_ingest;
"""


def upgrade() -> None:
    op.execute(STAGE_SIGNALS)
    op.execute("CREATE INDEX ix_stage_signals_batch ON stage_signals USING hash (batch)")
    op.execute("ALTER TABLE subscribers ADD COLUMN owner_login text")  # NULL: declared before, no owner yet
    op.execute("ALTER TABLE settlements ADD CONSTRAINT ck_settlements_carried_out CHECK (carried_out_at >= decided_at)")
    bind = op.get_bind()
    for function, trigger, _ in TRIGGERS:
        objects.create(bind, function, revision)
        objects.create(bind, trigger, revision)
    for name in FUNCTIONS:
        objects.create(bind, name, revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    for name in FUNCTIONS:  # SECURITY DEFINER: nobody's to call but the roles granted below (each name is one function)
        op.execute(f"REVOKE EXECUTE ON FUNCTION {name} FROM PUBLIC")
    if roles_exist():
        op.execute("REVOKE INSERT, UPDATE, DELETE ON signals, attempts, acks, command_responses, queue_apply, "
                   "queue_decide, subscribers, deliveries, declared_labels, settlements FROM ackstore_ingest")
        op.execute("REVOKE UPDATE (received_at) ON signals FROM ackstore_ingest")
        op.execute("REVOKE UPDATE (carried_out_at) ON settlements FROM ackstore_ingest")
        op.execute("REVOKE SELECT ON queue_decide FROM ackstore_ingest")
        op.execute(INGEST_AFTER)
        for name in FUNCTIONS:
            if name != "act_for":  # the others call it, as their owner
                op.execute(f"GRANT EXECUTE ON FUNCTION {name} TO ackstore_ingest")


def downgrade() -> None:
    for name in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION {name}")
    for function, trigger, table in reversed(TRIGGERS):
        op.execute(f"DROP TRIGGER {trigger} ON {table}")
        op.execute(f"DROP FUNCTION {function}()")
    op.execute("ALTER TABLE settlements DROP CONSTRAINT ck_settlements_carried_out")
    op.execute("DROP TABLE stage_signals")
    op.execute("ALTER TABLE subscribers DROP COLUMN owner_login")
    if roles_exist():
        op.execute(INGEST_BEFORE)
