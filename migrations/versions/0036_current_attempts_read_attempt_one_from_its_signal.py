"""every reader of an attempt reads attempt 1 from its signal

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-30 03:30:00

Issue 52 (decisions #148), after #146 and #147. signal_attempts is every attempt of every signal:
attempt 1 from the signal, a redelivery from its row, each signal joined to its redeliveries and
one joined row standing for attempt 1 too (#147's enumeration, named). The timeline, the reports
(labels, late acks), the metrics' late built-in acks and awaited facts, and open_next_attempt
read their attempts from it; the audit report joins its queue's keys to the signal and a
redelivery's row, as the sweep does. current_attempts is every signal joined to its
newest redelivery's row, if any; current_attempt_of reads the same by the signal's key and returns
the attempt's values without a sequence number (no caller read one): its return type changes, so
it is dropped and made again. Every one answers the same whether attempt 1's row is stored or not.
Nothing stored changes; the trigger still writes attempt 1.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement
from migrations.roles import roles_exist

revision = '0036'
down_revision = '0035'
branch_labels = None
depends_on = None

# What now reads attempt 1 from its signal, each with the version this replaces (callers after
# what they call): signal_attempts' readers, and the audit report.
READERS = {
    "signal_timeline": "0009",
    "report_audit": "0011",
    "report_labels": "0011",
    "report_late_acks": "0011",
    "late_builtin_acks": "0025",
    "builtin_facts_to_come": "0025",
    "metric_facts": "0025",
    "open_next_attempt": "0020",
}
READING_ROLES = "ackstore_ingest, ackstore_pipeline, ackstore_reporter"  # those that read current_attempts


def upgrade() -> None:
    bind = op.get_bind()
    objects.create(bind, "signal_attempts", revision)
    objects.create(bind, "current_attempts", revision)
    op.execute("DROP FUNCTION current_attempt_of(bigint)")  # its return type changes
    objects.create(bind, "current_attempt_of", revision)
    for name in READERS:
        objects.create(bind, name, revision)
    op.execute(ledger_statement("migrations", "own_everything"))  # a superuser's new objects: the admin role's
    if roles_exist():
        op.execute(f"GRANT SELECT ON signal_attempts TO {READING_ROLES}")


def downgrade() -> None:
    bind = op.get_bind()
    for name, replaced in READERS.items():
        objects.create(bind, name, replaced)
    objects.create(bind, "current_attempts", "0032")
    op.execute("DROP FUNCTION current_attempt_of(bigint)")
    objects.create(bind, "current_attempt_of", "0010")
    op.execute("DROP VIEW signal_attempts")
    op.execute(ledger_statement("migrations", "own_everything"))
