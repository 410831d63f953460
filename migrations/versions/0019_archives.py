"""settled, validated, sealed history leaves the hot tables for a Parquet archive

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 03:00:00

Issue 28 (decisions #102). ``archives`` records each prefix of the seals moved out: written as
Parquet, read back, checked against the seals' roots, and deleted in the transaction that
records it. A sealed row may be deleted only at or below the archived prefix, whoever asks: the
row triggers that refused UPDATE and DELETE of sealed rows now refuse UPDATE, and a statement
trigger per table checks the rows a DELETE took (one check per statement, not a call per row).
The group role ``ackstore_archive`` (the archive job) reads the facts and seals, records
archives and deletes what they hold; no other role may delete a fact. ``signal_facts`` is a
signal's facts (what `prove` proves and archiving moves together); ``signal_archivable`` says
whether nothing more can happen to a signal.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement
from migrations.roles import roles_exist

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None

FACTS = ("acks", "attempts", "command_responses", "ledger_batches", "request_results", "search_marks", "settlements",
         "signals", "validation_passes")
REPLACED = ("ackstore_refuse_sealed_change", "seal_leaves_never_change", *(f"{table}_sealed_stay" for table in FACTS))
NEW = ("signal_facts", "archived_upto", "archived_through", "signal_archivable", "ackstore_refuse_unarchived_delete",
       "ackstore_refuse_unarchived_leaves_delete", "seal_leaves_deleted_once_archived", "archives_never_change",
       *(f"{table}_deleted_once_archived" for table in FACTS))
NEW_FUNCTIONS = ("signal_facts(bigint)", "signal_archivable(bigint)", "ackstore_refuse_unarchived_delete()",
                 "ackstore_refuse_unarchived_leaves_delete()", "archived_upto()", "archived_through()")
ARCHIVE_ROLE = """
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ackstore_archive') THEN
    CREATE ROLE ackstore_archive NOLOGIN;
  END IF;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE NOTICE 'ackstore: this user may not create roles; ackstore_archive is left out (docs/roles.md)';
END $$
"""


def _archive_role_exists() -> bool:
    return op.get_bind().exec_driver_sql(
        "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ackstore_archive')").scalar_one()


def upgrade() -> None:
    op.execute("""
CREATE TABLE archives (
    number bigint NOT NULL, first_seal bigint NOT NULL, last_seal bigint NOT NULL, after_seq bigint NOT NULL,
    upto_seq bigint NOT NULL, location text NOT NULL, counts jsonb NOT NULL, received_upto timestamptz,
    archived_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_archives PRIMARY KEY (number),
    CONSTRAINT uq_archives_last_seal UNIQUE (last_seal),
    CONSTRAINT ck_archives_numbers CHECK (number > 0 AND last_seal >= first_seal AND first_seal > 0
                                          AND upto_seq >= after_seq))""")
    bind = op.get_bind()
    for name in (*REPLACED, *NEW):
        objects.create(bind, name, revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute(ARCHIVE_ROLE)
    if roles_exist() and _archive_role_exists():
        op.execute(f"GRANT SELECT, DELETE ON {', '.join(FACTS)}, seal_leaves TO ackstore_archive")
        op.execute("GRANT SELECT ON seals, pipeline_watermarks TO ackstore_archive")
        op.execute("GRANT SELECT (subscriber_id, signal_id, attempt, event_id, handouts, available_at, leased_at, "
                   "done_at, answered_handout, answered_labels) ON deliveries TO ackstore_archive")  # hand-outs
        op.execute("GRANT SELECT, INSERT ON archives TO ackstore_archive")
        op.execute("GRANT SELECT, INSERT, UPDATE ON pipeline_runs TO ackstore_archive")  # its run's record
        op.execute("GRANT SELECT ON archives TO ackstore_reporter")


def downgrade() -> None:
    if roles_exist() and _archive_role_exists():
        op.execute(f"REVOKE ALL ON {', '.join(FACTS)}, seal_leaves, seals, pipeline_watermarks, pipeline_runs, "
                   "deliveries FROM ackstore_archive")
    for table in FACTS:
        op.execute(f"DROP TRIGGER {table}_deleted_once_archived ON {table}")
    op.execute("DROP TRIGGER seal_leaves_deleted_once_archived ON seal_leaves")
    op.execute("DROP TABLE archives")
    bind = op.get_bind()
    for name in REPLACED:
        objects.create(bind, name, down_revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    for signature in NEW_FUNCTIONS:
        op.execute(f"DROP FUNCTION {signature}")
