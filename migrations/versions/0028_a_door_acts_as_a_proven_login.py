"""a front door acts as the login a request proved, switched into

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-28 21:30:00

Issue 51 (decisions #137): Ditto's HTTP API and WebSocket take Bearer tokens as well as Basic
credentials. A token carries no password to connect with, so the door connects as its own login
and switches (``SET ROLE``) into the login the token names — PostgreSQL lets it switch only into
the logins granted to it. The write functions asked ``session_user`` who the caller is, which is
the door's login after a switch: they ask ``caller_login()`` now, the login connected as or the
login switched into (never a group role, which every member could switch into).
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from ackstore.ledger.named_sql import ledger_statement

revision = '0028'
down_revision = '0027'
branch_labels = None
depends_on = None

# caller_login first: the others call it
REPLACED = ("may_act_for_connection", "claim_connection", "may_act_for", "declare_subscriber")
PREVIOUS = {"may_act_for_connection": "0020", "claim_connection": "0024", "may_act_for": "0020",
            "declare_subscriber": "0020"}


def upgrade() -> None:
    bind = op.get_bind()
    objects.create(bind, "caller_login", revision)
    for name in REPLACED:
        objects.create(bind, name, revision)
    op.execute(ledger_statement("migrations", "own_everything"))  # a superuser's new function: the admin role's


def downgrade() -> None:
    bind = op.get_bind()
    for name in REPLACED:
        objects.create(bind, name, PREVIOUS[name])
    op.execute("DROP FUNCTION caller_login()")
