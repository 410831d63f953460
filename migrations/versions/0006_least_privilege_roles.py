"""least-privilege group roles: ingest, pipeline, reporter, admin

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 10:40:00

Four NOLOGIN group roles (created if missing: roles belong to the server, not the database) and
the grants each needs on this database (docs/roles.md maps login roles onto them):

* ``ackstore_ingest`` — submit, declare, ack, respond, pull and the connector's writes;
* ``ackstore_pipeline`` — what the steps read and write;
* ``ackstore_reporter`` — the report views and what ``show`` reads, read-only;
* ``ackstore_admin`` — owns every object, so its members run the migrations.

Signals are immutable (0002): a trigger now refuses any UPDATE of them, so the column grant that
row locks need (``SELECT … FOR SHARE`` asks for an UPDATE privilege) lets nobody change one.
The ingest role may mark a settlement carried out (one column) and cannot touch a decided
result. A user that may not create roles gets a notice and no roles; grants need them.
Every later migration that adds a table or view grants it here too (tests/test_roles.py fails
on one without a grant).
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from migrations.roles import ROLES, roles_exist

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

QUEUES = ("queue_apply", "queue_index", "queue_decide", "queue_validate", "queue_settle")
STAGING = ("stage_twin_outcomes", "stage_search_things", "stage_search_rows", "stage_results", "stage_weak_acks",
           "stage_settlements", "stage_check_results", "stage_check_acks", "stage_check_settlements")
VIEWS = ("report_settlement_status", "report_qos1_audit")

# (privileges, tables) per role, exactly what each component's statements need, as of this
# revision (the current grants: ackstore/ledger/sql/objects/grants.sql). tests/test_roles.py shows each in use (or names why it cannot).
GRANTS = {
    "ackstore_ingest": [
        ("SELECT, INSERT, UPDATE (received_at)", ("signals",)),  # UPDATE: row locks only (the trigger refuses changes)
        ("INSERT", ("ack_requests", "queue_apply")),
        ("SELECT, INSERT", ("attempts", "acks", "command_responses")),
        ("SELECT, INSERT, UPDATE", ("queue_decide", "subscribers", "deliveries")),  # queue_decide: ON CONFLICT DO UPDATE
        ("SELECT, INSERT, DELETE", ("declared_labels",)),
        ("SELECT, UPDATE (carried_out_at)", ("settlements",)),
        ("SELECT", ("request_results", "thing_events", "search_index", "search_things")),
    ],
    "ackstore_pipeline": [
        ("SELECT", ("signals", "attempts", "subscribers", "declared_labels")),
        ("SELECT, INSERT", ("command_responses", "request_results", "settlements", "thing_events", "pipeline_runs",
                            "pipeline_watermarks", "queue_validate", "queue_settle")),
        ("UPDATE", ("acks", "things", "search_things", "pipeline_runs", "pipeline_watermarks", "queue_index")),
        ("SELECT, INSERT", ("acks", "things", "search_things", "search_index", "queue_index")),
        ("DELETE", ("search_index", "queue_apply", "queue_index", "queue_decide", "queue_validate", "queue_settle",
                    "stage_results")),
        ("SELECT", ("queue_apply", "queue_decide")),
        ("SELECT, INSERT, TRUNCATE", STAGING),
    ],
    "ackstore_reporter": [
        ("SELECT", (*VIEWS, "signals", "acks", "attempts", "request_results", "settlements", "deliveries")),
    ],
}

CREATE_ROLES = """
DO $$
DECLARE name text;
BEGIN
  FOREACH name IN ARRAY ARRAY['ackstore_ingest', 'ackstore_pipeline', 'ackstore_reporter', 'ackstore_admin'] LOOP
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
      EXECUTE format('CREATE ROLE %I NOLOGIN', name);
    END IF;
  END LOOP;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE NOTICE 'ackstore: this user may not create roles; the least-privilege roles are left out (docs/roles.md)';
END $$
"""

# Signals are immutable: a trigger refuses any UPDATE (ackstore/ledger/sql/objects/signals.sql).
IMMUTABLE_SIGNALS = ("ackstore_refuse_change", "signals_are_immutable")

OWN_EVERYTHING = """
DO $$
DECLARE object record;
BEGIN
  IF NOT pg_has_role(current_user, 'ackstore_admin', 'MEMBER') THEN
    RAISE NOTICE 'ackstore: % is no member of ackstore_admin; the objects keep their owner', current_user;
    RETURN;
  END IF;
  FOR object IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'p') LOOP  -- a table's sequences follow it
    EXECUTE format('ALTER %s %I OWNER TO ackstore_admin',
                   CASE object.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, object.relname);
  END LOOP;
  ALTER FUNCTION ackstore_refuse_change() OWNER TO ackstore_admin;  -- its downgrade runs as the admin role
  EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO ackstore_admin', current_schema());
END $$
"""


def upgrade() -> None:
    for name in IMMUTABLE_SIGNALS:
        objects.create(op.get_bind(), name, revision)
    op.execute(CREATE_ROLES)
    if not roles_exist():
        return
    for role in ROLES[:3]:
        op.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
    for role, grants in GRANTS.items():
        for privileges, tables in grants:
            op.execute(f"GRANT {privileges} ON {', '.join(tables)} TO {role}")
    op.execute(OWN_EVERYTHING)


def downgrade() -> None:
    if roles_exist():
        for role, grants in GRANTS.items():
            for _, tables in grants:
                op.execute(f"REVOKE ALL ON {', '.join(tables)} FROM {role}")
        # The schema's grants are its owner's to revoke, not the admin role's the migrations run as
        # (a revoke by anyone else does nothing): back to the session's user, as 0006 ran.
        op.execute("RESET ROLE")
        op.execute(f"REVOKE USAGE ON SCHEMA public FROM {', '.join(ROLES)}")
        op.execute("REVOKE CREATE ON SCHEMA public FROM ackstore_admin")
    op.execute("DROP TRIGGER signals_are_immutable ON signals")
    op.execute("DROP FUNCTION ackstore_refuse_change()")
