"""a built-in aggregated answer's entries are derived where read, not stored

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-29 12:00:00

Issue 52 (decisions #141): a request answered 200 over both built-in labels stored, in its body,
an entry per label that only restates the command's response and its search mark — sealed facts
of their own. The sweep now stores derived_builtin_body() (each entry JSON null) and the view
request_answers derives the entries where they are read. Rows stored before keep their bodies,
which request_answers passes through: a sealed row never changes. The downgrade stores the derived
entries in their rows, and refuses once one of those is sealed, when one cannot be derived (its
facts gone), or when anything was archived (an archived result may hold the form).
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    objects.create(bind, "derived_builtin_body", revision)
    objects.create(bind, "holds_derived_entries", revision)
    objects.create(bind, "created_location", revision)
    objects.create(bind, "request_answers", revision)
    op.execute(ledger_statement("migrations", "own_everything"))  # a superuser's new function: the admin role's


def downgrade() -> None:
    bind = op.get_bind()
    held = bind.execute(ledger_statement("migrations", "derived_builtin_held")).one()
    if held.sealed or held.archived:
        why = (f"{held.sealed} sealed request results hold derived built-in entries, and a sealed fact never "
               "changes" if held.sealed else
               "results were archived, and an archived one may hold derived built-in entries, which 0028 cannot read")
        raise RuntimeError(f"migration 0029 cannot be undone: {why}. Restore a backup taken before the upgrade.")
    bind.execute(ledger_statement("migrations", "store_derived_builtin_entries"))
    left = bind.execute(ledger_statement("migrations", "derived_builtin_held")).one().held
    if left:
        raise RuntimeError(f"migration 0029 cannot be undone: {left} request results hold derived built-in "
                           "entries whose facts are gone")
    objects.create(bind, "request_answers", "0008")
    op.execute("DROP FUNCTION created_location(text, text)")
    op.execute("DROP FUNCTION holds_derived_entries(jsonb, text, jsonb)")
    op.execute("DROP FUNCTION derived_builtin_body()")
