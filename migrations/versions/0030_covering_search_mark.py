"""a command's search mark is read as the first mark reaching its revision, not by a range join

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-29 15:00:00

builtin_fact_times and signal_facts found one command's search mark by a range join on the marks'
key (thing_id, to_revision): an index scan from the command's revision over every later mark of
its thing, each filtered out but the one. A thing indexed in every pass has a mark a pass, so the
read of an old command (the metrics' late facts, `prove`, the archive job) grew with its thing's
history. covering_search_mark reads the first row of the key at the revision (a thing's marks
follow one another: the same answer). mark_covers is the rule both it and command_facts' join use
(decisions #142). Nothing stored changes.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0030'
down_revision = '0029'
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    objects.create(bind, "mark_covers", revision)
    objects.create(bind, "covering_search_mark", revision)
    objects.create(bind, "command_facts", revision)
    objects.create(bind, "builtin_fact_times", revision)
    objects.create(bind, "signal_facts", revision)
    op.execute(ledger_statement("migrations", "own_everything"))  # a superuser's new function: the admin role's


def downgrade() -> None:
    bind = op.get_bind()
    objects.create(bind, "command_facts", "0007")
    objects.create(bind, "builtin_fact_times", "0025")
    objects.create(bind, "signal_facts", "0019")
    op.execute("DROP FUNCTION covering_search_mark(text, bigint)")
    op.execute("DROP FUNCTION mark_covers(bigint, bigint, bigint)")
