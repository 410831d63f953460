"""a settlement says what the transport did instead of its decision, when it could not do it

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25 23:00:00

Issue 27: MQTT has no nack and redelivers only when a session resumes. Without
``reconnectForRedelivery`` a redeliver decision is PUBACKed, as Ditto does, and the settlement
row says so: ``settlements.carried_out_as`` is the settlement the transport performed instead of
the decision (``ack``), NULL when it performed the decision (decisions #99). It is written with
``carried_out_at`` by ``record_carried_out`` (a fourth argument) and, like it, never changes
afterwards (``settlements_keep_their_decision``); a CHECK keeps it a settlement other than the
decision, and only on a settlement carried out.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement
from migrations.roles import roles_exist

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None

CHECK = ("carried_out_as IS NULL OR (carried_out_at IS NOT NULL AND carried_out_as <> decision AND "
         "carried_out_as IN ('ack', 'reject', 'redeliver', 'dead-letter'))")


def _record_carried_out(revision: str, old_signature: str) -> None:
    """Replace record_carried_out (its signature changes) as of ``revision``, nobody's to call
    but the ingest role's."""
    op.execute(f"DROP FUNCTION record_carried_out({old_signature})")
    objects.create(op.get_bind(), "record_carried_out", revision)
    op.execute(ledger_statement("migrations", "own_everything"))
    op.execute("REVOKE EXECUTE ON FUNCTION record_carried_out FROM PUBLIC")
    if roles_exist():
        op.execute("GRANT EXECUTE ON FUNCTION record_carried_out TO ackstore_ingest")


def upgrade() -> None:
    op.execute("ALTER TABLE settlements ADD COLUMN carried_out_as text")
    op.execute(f"ALTER TABLE settlements ADD CONSTRAINT ck_settlements_carried_out_as CHECK ({CHECK})")
    objects.create(op.get_bind(), "settlements_keep_their_decision", revision)
    _record_carried_out(revision, "bigint[], integer[], boolean")


def downgrade() -> None:
    _record_carried_out(down_revision, "bigint[], integer[], boolean, text")
    objects.create(op.get_bind(), "settlements_keep_their_decision", down_revision)
    op.execute("ALTER TABLE settlements DROP CONSTRAINT ck_settlements_carried_out_as")
    op.execute("ALTER TABLE settlements DROP COLUMN carried_out_as")
