"""the windowed reports: latency, watermarks, late acks, labels

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 12:00:00

* ``ix_signals_received_at`` (BRIN): the window every windowed report reads — signals arrive in
  time order, so a block range index of a few pages finds a window's signals.
* Functions (ackstore/ledger/sql/objects/): ``needs_transport_settlement``, ``settlement_state``, the
  window ``signals_received``, each signal's path ``signal_paths``, and the reports
  ``report_latency``, ``report_watermarks``, ``report_unsettled``, ``report_late_acks`` and
  ``report_labels``; the report views call ``needs_transport_settlement`` instead of spelling
  it out. EXECUTE on functions is PUBLIC's by default; they read as their caller, and
  the reporter may read every table they name.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from migrations.roles import owned_by_admin

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

# The report views this revision replaces: they call needs_transport_settlement instead of
# spelling the rule out (their SQL, and the functions': ackstore/ledger/sql/objects/).
VIEWS = ("report_settlement_status", "report_qos1_audit")

# The functions this revision creates, callers first (so: created in reverse order).
SIGNATURES = {
    "report_labels": "timestamptz, timestamptz, text",
    "report_late_acks": "timestamptz, timestamptz, text",
    "report_unsettled": "timestamptz, timestamptz, text",
    "report_watermarks": "timestamptz, timestamptz, text",
    "report_latency": "timestamptz, timestamptz, interval, text",
    "signal_paths": "timestamptz, timestamptz, text",
    "signals_received": "timestamptz, timestamptz, text",
    "current_attempt_of": "bigint",
    "settlement_state": "boolean, boolean, text, timestamptz",
    "needs_transport_settlement": "text, text",
}


def upgrade() -> None:
    op.execute("CREATE INDEX ix_signals_received_at ON signals USING brin (received_at)")
    for name in reversed(SIGNATURES):
        objects.create(op.get_bind(), name, revision)
        owned_by_admin("FUNCTION", f"{name}({SIGNATURES[name]})")
    for view in VIEWS:
        objects.create(op.get_bind(), view, revision)


def downgrade() -> None:
    for view in VIEWS:  # before the function they call goes
        objects.create(op.get_bind(), view, down_revision)
    for name, signature in SIGNATURES.items():  # callers first
        op.execute(f"DROP FUNCTION {name}({signature})")
    op.execute("DROP INDEX ix_signals_received_at")
