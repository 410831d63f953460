"""a plain response is derived where read, not stored

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29 18:30:00

Issue 52 (decisions #143): the built-in-only shortcut's answer — a request for twin-persisted
alone, a response required — stored the command's response payload as its body and the
correlation id as its headers: both restate sealed facts (the response, the signal). The sweep
now stores neither (holds_derived_response: cause 'response', headers NULL, a form no row stored
before has) and request_answers derives them where read. Rows stored before keep their form. The
downgrade stores the derived answers in their rows, and refuses once one of those is sealed, when
one cannot be derived (its response or signal gone), or when anything was archived (an archived
result may hold the form).
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0031'
down_revision = '0030'
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    objects.create(bind, "holds_derived_response", revision)
    objects.create(bind, "request_answers", revision)
    op.execute(ledger_statement("migrations", "own_everything"))  # a superuser's new function: the admin role's


def downgrade() -> None:
    bind = op.get_bind()
    held = bind.execute(ledger_statement("migrations", "derived_response_held")).one()
    why = (f"{held.sealed} sealed request results hold a derived plain response, and a sealed fact never changes"
           if held.sealed else
           f"{held.underivable} request results hold a derived plain response whose facts are gone"
           if held.underivable else
           "results were archived, and an archived one may hold a derived plain response, which 0030 cannot read"
           if held.archived else None)
    if why:
        raise RuntimeError(f"migration 0031 cannot be undone: {why}. Restore a backup taken before the upgrade.")
    bind.execute(ledger_statement("migrations", "store_derived_responses"))
    objects.create(bind, "request_answers", "0029")
    op.execute("DROP FUNCTION holds_derived_response(text, jsonb)")
