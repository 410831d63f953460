"""every fact has a number and belongs to one seal; a sealed row never changes

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 02:00:00

Issue 28 (decisions #101). The facts — signals, attempts, command responses, acks, search marks,
ledger batches, request results, validation passes and carried-out settlements — get ``seq``, a
number from the sequence ``ledger_seq`` drawn when the fact is final: when written, for all but a
settlement, which is numbered when carried out (``settlements_keep_their_decision``). The facts
already stored are numbered here, table by table in key order. A seal (``seals``, its leaves in
``seal_leaves``) covers an interval of numbers: the rows' canonical bytes are the leaves of an
RFC 6962 tree (``fact_leaves``). A statement drawing numbers holds the numbering lock (ROW
EXCLUSIVE on the empty table ``fact_numbering``), which ``seal_position()`` takes SHARE to know
every number below its position committed.
Triggers refuse UPDATE and DELETE of a sealed row and TRUNCATE
of a sealed table; seals never change.

A counted ack that came after the deadline of a request decided by it is no longer flagged
'late' in its row by the sweep (that would change a sealed row): ``request_acks`` derives it
(``decided_disposition``), as it derives built-in acks. Rows flagged before stay so.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement
from migrations.roles import owned_by_admin, roles_exist

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None

# Each fact table, with the key its stored rows are numbered in, and whether a row is numbered
# when written (a settlement: when carried out).
FACTS = {
    "signals": ("id", True),
    "attempts": ("signal_id, attempt", True),
    "command_responses": ("signal_id", True),
    "acks": ("id", True),
    "ledger_batches": ("id", True),
    "search_marks": ("batch_id, thing_id, to_revision", True),
    "request_results": ("batch_id, signal_id, attempt", True),
    "validation_passes": ("results_upto", True),
    "settlements": ("id", False),
}
# Objects this migration makes or replaces, in the order they depend on one another.
OBJECTS = (
    "decided_disposition", "request_acks", "acks_keep_their_facts", "settlements_keep_their_decision",
    "settlements_number_carried_out", "settlements_numbered_when_written_carried_out",
    "fact_leaf", "fact_leaves", "sealed_upto", "seal_position", "ackstore_numbering_writer",
    *(f"{table}_numbered_under_lock" for table in FACTS), "ackstore_refuse_sealed_change",
    "ackstore_refuse_sealed_truncate", "seals_never_change", "seal_leaves_never_change",
    *(f"{table}_sealed_stay" for table in FACTS), *(f"{table}_sealed_not_truncated" for table in FACTS),
)
REPLACED = ("request_acks", "acks_keep_their_facts", "settlements_keep_their_decision")
DROPPED_FUNCTIONS = ("settlements_number_carried_out()", "fact_leaf(bytea)", "sealed_upto()", "seal_position()",
                     "ackstore_numbering_writer()", "ackstore_refuse_sealed_change()",
                     "ackstore_refuse_sealed_truncate()", "decided_disposition(text, timestamptz, timestamptz, text)")


def _number(table: str, key: str, when_written: bool) -> None:
    op.execute(f"ALTER TABLE {table} ADD COLUMN seq bigint")
    op.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")  # signals and acks refuse any UPDATE
    final = "" if when_written else "WHERE carried_out_at IS NOT NULL"
    op.execute(f"""
UPDATE {table} t SET seq = n.seq
FROM (SELECT ctid AS row_id, nextval('ledger_seq') AS seq FROM (SELECT ctid FROM {table} {final} ORDER BY {key}) o) n
WHERE t.ctid = n.row_id""")
    op.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
    if when_written:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN seq SET DEFAULT nextval('ledger_seq'::regclass)")
        op.execute(f"ALTER TABLE {table} ALTER COLUMN seq SET NOT NULL")
    else:
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT ck_{table}_seq CHECK ((seq IS NULL) = (carried_out_at IS NULL))")
    op.execute(f"CREATE INDEX ix_{table}_seq ON {table} USING brin (seq)")


def upgrade() -> None:
    op.execute("CREATE SEQUENCE ledger_seq")
    owned_by_admin("SEQUENCE", "ledger_seq")
    for table, (key, when_written) in FACTS.items():
        _number(table, key, when_written)
    op.execute("""
CREATE TABLE seals (
    number bigint NOT NULL, after_seq bigint NOT NULL, upto_seq bigint NOT NULL, counts jsonb NOT NULL,
    leaves bigint NOT NULL, root bytea NOT NULL, previous bytea NOT NULL, hash bytea NOT NULL,
    sealed_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_seals PRIMARY KEY (number),
    CONSTRAINT uq_seals_upto_seq UNIQUE (upto_seq),
    CONSTRAINT ck_seals_numbers CHECK (number > 0 AND upto_seq >= after_seq AND after_seq >= 0 AND leaves >= 0),
    CONSTRAINT ck_seals_hashes CHECK (octet_length(root) = 32 AND octet_length(previous) = 32
                                      AND octet_length(hash) = 32))""")
    op.execute("""
CREATE TABLE seal_leaves (
    seal bigint NOT NULL, chunk integer NOT NULL, leaves bytea NOT NULL,
    CONSTRAINT pk_seal_leaves PRIMARY KEY (seal, chunk),
    CONSTRAINT fk_seal_leaves_seal_seals FOREIGN KEY (seal) REFERENCES seals (number) DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT ck_seal_leaves_leaves CHECK (chunk >= 0 AND octet_length(leaves) % 32 = 0 AND octet_length(leaves) > 0))""")
    op.execute("ALTER TABLE seal_leaves ALTER COLUMN leaves SET STORAGE EXTERNAL")  # hashes do not compress
    op.execute("CREATE TABLE fact_numbering (id smallint NOT NULL, CONSTRAINT pk_fact_numbering PRIMARY KEY (id))")
    bind = op.get_bind()
    for name in OBJECTS:
        objects.create(bind, name, revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute("REVOKE EXECUTE ON FUNCTION seal_position() FROM PUBLIC")
    op.execute("REVOKE EXECUTE ON FUNCTION ackstore_numbering_writer() FROM PUBLIC")  # its triggers call it
    if roles_exist():
        op.execute("GRANT EXECUTE ON FUNCTION seal_position() TO ackstore_pipeline")
        op.execute("GRANT USAGE ON SEQUENCE ledger_seq TO ackstore_pipeline")
        op.execute("GRANT SELECT, INSERT ON seals, seal_leaves TO ackstore_pipeline")
        op.execute("GRANT SELECT ON fact_leaves TO ackstore_pipeline")
        op.execute("GRANT SELECT ON seals, seal_leaves, search_marks, ledger_batches, validation_passes "
                   "TO ackstore_reporter")


def downgrade() -> None:
    if roles_exist():
        op.execute("REVOKE SELECT ON search_marks, ledger_batches, validation_passes FROM ackstore_reporter")
    for table in FACTS:
        op.execute(f"DROP TRIGGER {table}_sealed_stay ON {table}")
        op.execute(f"DROP TRIGGER {table}_sealed_not_truncated ON {table}")
        op.execute(f"DROP TRIGGER {table}_numbered_under_lock ON {table}")
    op.execute("DROP TRIGGER settlements_numbered_when_written_carried_out ON settlements")
    op.execute("DROP VIEW fact_leaves")
    op.execute("DROP TABLE seal_leaves")
    op.execute("DROP TABLE fact_numbering")
    op.execute("DROP TABLE seals")
    bind = op.get_bind()
    for name in REPLACED:
        objects.create(bind, name, down_revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    for signature in DROPPED_FUNCTIONS:
        op.execute(f"DROP FUNCTION {signature}")
    for table, (_key, when_written) in FACTS.items():
        op.execute(f"ALTER TABLE {table} DROP COLUMN seq")
    op.execute("DROP SEQUENCE ledger_seq")
