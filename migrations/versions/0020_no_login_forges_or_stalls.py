"""no login forges another's answers or stalls another's work

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 03:00:00

Issue 37 (decisions #104). A connection belongs to the login that claimed it first
(``connections``): only it declares the connection's subscribers, stores its signals, opens their
next attempts and records their settlements carried out — and only as its transport could carry
them out. A live response only from a subscriber the signal was handed to; a live hand-out only of
a signal of the submitting transaction, to a subscriber of its namespace, under a key drawn in
SQL; a next attempt carries only the built-in acks that counted in time. The locks writers and
steps wait for become rows of ``thing_locks`` and ``ledger_locks``, which no role may lock but
through the functions of ``locking.sql``: an advisory lock is any login's to take. Rows a
committed COPY left in ``stage_signals`` are removed by the pipeline.

The connections subscribers were declared into before are claimed here for the login that owns
all their subscribers, or for nobody (an admin gives them an owner) when several or none do.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement, load
from migrations.roles import roles_exist

revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None

# Made here, in the order they depend on one another.
NEW = ("builtin_issuer", "carried_out_as_allowed", "shared_source", "labels_to_request_again", "thing_bucket",
       "lock_things", "lock_step", "lock_facts", "lock_sealer", "may_act_for_connection", "claim_connection",
       "act_for_connection", "act_for_source", "clear_abandoned_staged_signals")
NEW_FUNCTIONS = ("builtin_issuer()", "carried_out_as_allowed(text, text)", "shared_source(text)",
                 "labels_to_request_again(text[], jsonb)", "thing_bucket(text)", "lock_things(text[])",
                 "lock_step(text)", "lock_facts(boolean)", "lock_sealer()", "may_act_for_connection(text)",
                 "claim_connection(text)", "act_for_connection(text)", "act_for_source(text)",
                 "clear_abandoned_staged_signals()")
REPLACED = ("needs_transport_settlement", "may_act_for", "declare_subscriber", "store_ack", "merge_staged_signals",
            "hand_out_live", "lock_retransmitted", "retransmitted", "record_carried_out", "record_latest_carried_out")
# Replaced with other arguments: the old signature is dropped, the new one made (and back).
RESIGNED = {
    "insert_signal": ("insert_signal(integer, text, text, text, text, text, text, text, text, text, text, jsonb, "
                      "jsonb, text[], boolean, bigint)",
                      "insert_signal(text, text, text, text, text, text, text, text, text, text, jsonb, jsonb, "
                      "text[], boolean, bigint)"),
    "open_next_attempt": ("open_next_attempt(bigint, integer, text[], text[], text)",
                          "open_next_attempt(bigint, integer, text[])"),
}
LOCK_ROWS = """
INSERT INTO thing_locks (bucket) SELECT generate_series(0, 65535);
INSERT INTO ledger_locks (name) VALUES ('declare'), ('facts'), ('seal')"""
# The login of a connection's first-declared subscriber that has one claimed it first; a
# connection whose subscribers all came before 0016 has no owner, as they have none (#97).
CLAIMED_BEFORE = """
INSERT INTO connections (id, owner_login, claimed_at)
SELECT u.connection_id, (array_agg(u.owner_login ORDER BY u.declared_at, u.id) FILTER (WHERE u.owner_login IS NOT NULL))[1],
       min(u.declared_at)
FROM subscribers u WHERE u.connection_id IS NOT NULL
GROUP BY u.connection_id"""
# Logins whose subscribers joined another login's connection before 0020 lose them (issue 37).
JOINED_BEFORE = """
DO $$
DECLARE joined text;
BEGIN
  SELECT string_agg(format('%s (of %s, declared into %s)', u.id, u.owner_login, u.connection_id), ', ' ORDER BY u.id)
  INTO joined
  FROM subscribers u JOIN connections c ON c.id = u.connection_id
  WHERE u.owner_login IS DISTINCT FROM c.owner_login AND c.owner_login IS NOT NULL;
  IF joined IS NOT NULL THEN
    RAISE NOTICE 'ackstore: these subscribers joined a connection another login claimed first and may no longer act: %; '
                 'an admin moves a connection with UPDATE connections SET owner_login = ...', joined;
  END IF;
END $$"""


def upgrade() -> None:
    op.execute("""
CREATE TABLE connections (
    id text NOT NULL, owner_login text, claimed_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_connections PRIMARY KEY (id),
    CONSTRAINT ck_connections_id CHECK (id <> ''))""")
    op.execute("""
CREATE TABLE thing_locks (bucket integer NOT NULL, CONSTRAINT pk_thing_locks PRIMARY KEY (bucket),
                          CONSTRAINT ck_thing_locks_bucket CHECK (bucket BETWEEN 0 AND 65535))""")
    op.execute("CREATE TABLE ledger_locks (name text NOT NULL, CONSTRAINT pk_ledger_locks PRIMARY KEY (name))")
    op.execute(LOCK_ROWS)
    op.execute(CLAIMED_BEFORE)
    op.execute(JOINED_BEFORE)
    bind = op.get_bind()
    for name, (old, _new) in RESIGNED.items():
        op.execute(f"DROP FUNCTION {old}")
    for name in (*NEW, *REPLACED, *RESIGNED):
        objects.create(bind, name, revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute(load(objects.GRANTS)["definers"])
    if roles_exist():
        op.execute("GRANT EXECUTE ON FUNCTION may_act_for_connection(text), claim_connection(text), "
                   f"{RESIGNED['insert_signal'][1]}, {RESIGNED['open_next_attempt'][1]} TO ackstore_ingest")
        op.execute("GRANT EXECUTE ON FUNCTION lock_step(text), lock_facts(boolean), lock_sealer(), "
                   "clear_abandoned_staged_signals() TO ackstore_pipeline")
        op.execute("""
DO $$ BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'ackstore_archive') THEN
    GRANT EXECUTE ON FUNCTION lock_step(text) TO ackstore_archive;
  END IF;
END $$""")


def downgrade() -> None:
    bind = op.get_bind()
    for name, (_old, new) in RESIGNED.items():
        op.execute(f"DROP FUNCTION {new}")
    for name in (*REPLACED, *RESIGNED):
        objects.create(bind, name, down_revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute(load(objects.GRANTS)["definers"])
    if roles_exist():
        op.execute(f"GRANT EXECUTE ON FUNCTION {RESIGNED['insert_signal'][0]}, {RESIGNED['open_next_attempt'][0]} "
                   "TO ackstore_ingest")
    for signature in reversed(NEW_FUNCTIONS):
        op.execute(f"DROP FUNCTION {signature}")
    op.execute("DROP TABLE ledger_locks")
    op.execute("DROP TABLE thing_locks")
    op.execute("DROP TABLE connections")
