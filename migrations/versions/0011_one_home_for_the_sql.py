"""one home for the ledger's SQL: the spec's words named once, where a signal stands, one audit name

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 08:00:00

* The views and functions are SQL files (ackstore/ledger/sql/objects/); this and every earlier
  migration asks for an object as of its revision instead of pasting a copy.
* The spec's words are functions PostgreSQL folds into literals when it plans: ``counted()``
  (the disposition that counts), the built-in labels ``twin_persisted()``, ``search_persisted()``,
  ``live_response()`` and ``builtin_labels()``, and ``judged_by_deadline(cause)``. The views and
  functions that spelled them out call them (same plans, same answers).
* ``signal_state`` is where a signal stands, for every surface; it replaces ``settlement_state``:
  ``signal_paths`` says whether each signal is settled by it, the unsettled list's ``why`` is it; a carried-out
  dead-letter or redelivery is no longer "settled" anywhere (decision #71).
* ``report_qos1_audit`` is ``report_audit``: the audit has one name (the CLI's, the page's, the ledger's).
* Every object is the admin role's (``own_everything``): a database migrated from empty kept
  migration 0007's functions and 0006's trigger function as the migrating user's.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement
from migrations.roles import roles_exist

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

RULES = {"counted": "", "twin_persisted": "", "search_persisted": "", "live_response": "", "builtin_labels": "",
         "judged_by_deadline": "text"}  # name: arguments
# Replaced in place (same columns, same arguments), each after what it calls.
REPLACED = ("builtin_disposition", "builtin_facts", "thing_events", "report_late_acks", "report_labels")
# signal_paths gives whether a signal is settled (a boolean, and the facts the unsettled list
# needs) instead of settlement_state's word: a new result type is a new function. The
# reports reading it are SQL functions, which PostgreSQL does not track, so the drop is free; those
# that read ``settled`` are replaced after it (report_latency reads neither: it stays).
PATHS = "signal_paths(timestamptz, timestamptz, text)"
PATH_READERS = ("report_watermarks", "report_unsettled")
SETTLEMENT_STATE = "settlement_state(boolean, boolean, text, timestamptz)"


def upgrade() -> None:
    bind = op.get_bind()
    for name in (*RULES, "signal_state", *REPLACED):
        objects.create(bind, name, revision)
    op.execute(f"DROP FUNCTION {PATHS}")
    for name in ("signal_paths", *PATH_READERS):
        objects.create(bind, name, revision)
    op.execute(f"DROP FUNCTION {SETTLEMENT_STATE}")
    op.execute("DROP VIEW report_qos1_audit")
    objects.create(bind, "report_audit", revision)
    if roles_exist():
        op.execute("GRANT SELECT ON report_audit TO ackstore_reporter")
        op.execute("GRANT SELECT ON command_responses TO ackstore_reporter")  # signal_state: did it fail?
    op.execute(ledger_statement("migrations", "own_everything"))


def downgrade() -> None:
    bind = op.get_bind()
    op.execute("DROP VIEW report_audit")
    objects.create(bind, "report_qos1_audit", down_revision)
    if roles_exist():
        op.execute("GRANT SELECT ON report_qos1_audit TO ackstore_reporter")
        op.execute("REVOKE SELECT ON command_responses FROM ackstore_reporter")
    objects.create(bind, "settlement_state", down_revision)
    op.execute(f"DROP FUNCTION {PATHS}")
    for name in ("signal_paths", *PATH_READERS, *reversed(REPLACED)):
        objects.create(bind, name, down_revision)
    op.execute("DROP FUNCTION signal_state(boolean, boolean, boolean, text, boolean)")
    for name, arguments in reversed(RULES.items()):
        op.execute(f"DROP FUNCTION {name}({arguments})")
