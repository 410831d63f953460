"""every attempt is a row of attempts; aggregated headers derived; statistics after merges

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 09:00:00

* ``attempts`` holds every attempt, the first too: a statement trigger on ``signals`` writes
  attempt 1 (the signal's labels, its receipt as the opening, its deadline) with every insert,
  so no writer of signals can forget it. The view ``request_attempts`` (attempt 1 as a constant
  over ``signals``, UNION ALL the later attempts) goes: the planner had no statistics for its
  ``attempt`` and sized every join on it at 1/200 of the truth — a backlog of a million requests
  was nested-looped. ``attempts`` loses its foreign key (it is a hot append-only child of
  ``signals`` now); the gate finds orphans.
* An aggregated answer's headers are the command's own (without requested-acks, with
  response-required false): the sweep's SQL stores NULL for them and the view
  ``request_answers`` derives them from the signal; every reader of an answer reads it there.
  Status and body stay stored (A.2.4). Answers stored before keep their headers.
* ``ack_entry`` builds an entry with one ``jsonb_build_object`` per level (``ack_entry_headers``)
  instead of concatenating objects: the sweep writes two per decided request.
* The SQL functions the sweep and the gate call are PARALLEL SAFE (they are pure): the planner
  judges parallel safety before it inlines them, and one unsafe function kept the gate's query
  over a backlog on one core.
* ``refresh_statistics(table, written)``: a merge that grew a table by a tenth or more analyzes
  it, so that the next statement plans a backlog as one; a SECURITY DEFINER function (only an
  owner may analyze), executable by the pipeline. A result's jsonb columns keep no statistics
  (nothing is planned on their values; they made an ANALYZE of request_results 3× slower).

Every answer is unchanged: the views read the same attempts, and the functions give the same
entries. The downgrade removes the first attempts and restores 0007's view and function.
"""

from __future__ import annotations

from alembic import op

from ackstore.ledger import objects
from migrations.roles import READERS, owned_by_admin, roles_exist

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


# The objects this revision creates or replaces, in the order they depend on each other (their SQL:
# ackstore/ledger/sql/objects/, as of this revision): attempt 1 of every signal, written with it by
# a statement trigger; the views over attempts; the answers; the entries; the statistics.
FIRST_ATTEMPTS = ("ackstore_open_first_attempts", "signals_open_first_attempts")
REPLACED = ("current_attempts", "builtin_acks", "report_qos1_audit")
CREATED = ("request_answers", "ack_entry_headers")
REPLACED_FUNCTIONS = ("ack_entry", "builtin_disposition")  # builtin_disposition: now PARALLEL SAFE


def upgrade() -> None:
    op.drop_constraint(op.f("fk_attempts_signal_id_signals"), "attempts", type_="foreignkey")
    op.drop_constraint(op.f("ck_attempts_attempt"), "attempts", type_="check")
    op.create_check_constraint(op.f("ck_attempts_attempt"), "attempts", "attempt > 0")
    op.execute("INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at) "
               "SELECT s.id, 1, s.requested_acks, s.received_at, s.deadline_at FROM signals s")
    for name in (*FIRST_ATTEMPTS, *REPLACED):
        objects.create(op.get_bind(), name, revision)
    op.execute("DROP VIEW request_attempts")
    op.alter_column("request_results", "headers", nullable=True)
    for name in (*CREATED, *REPLACED_FUNCTIONS, "refresh_statistics"):
        objects.create(op.get_bind(), name, revision)
    op.execute("REVOKE EXECUTE ON FUNCTION refresh_statistics(text, bigint) FROM PUBLIC")
    op.execute("ALTER TABLE request_results ALTER COLUMN body SET STATISTICS 0, "
               "ALTER COLUMN headers SET STATISTICS 0, ALTER COLUMN ack_statuses SET STATISTICS 0")
    if roles_exist():
        owned_by_admin("FUNCTION", "ackstore_open_first_attempts()")
        owned_by_admin("FUNCTION", "ack_entry_headers(jsonb, boolean, text)")
        owned_by_admin("FUNCTION", "refresh_statistics(text, bigint)")  # it analyzes as its owner
        op.execute("GRANT EXECUTE ON FUNCTION refresh_statistics(text, bigint) TO ackstore_pipeline")
        owned_by_admin("VIEW", "request_answers")
        op.execute(f"GRANT SELECT ON request_answers TO {', '.join(READERS)}")
    op.execute("ANALYZE attempts")  # its statistics are what this revision is for


def downgrade() -> None:
    op.execute("ALTER TABLE request_results ALTER COLUMN body SET STATISTICS -1, "
               "ALTER COLUMN headers SET STATISTICS -1, ALTER COLUMN ack_statuses SET STATISTICS -1")
    op.execute("DROP FUNCTION refresh_statistics(text, bigint)")
    op.execute("UPDATE request_results r SET headers = a.headers FROM request_answers a "
               "WHERE r.headers IS NULL AND a.signal_id = r.signal_id AND a.attempt = r.attempt")
    op.execute("DROP VIEW request_answers")
    op.alter_column("request_results", "headers", nullable=False)
    for name in REPLACED_FUNCTIONS:
        objects.create(op.get_bind(), name, down_revision)
    op.execute("DROP FUNCTION ack_entry_headers(jsonb, boolean, text)")
    for name in ("request_attempts", *REPLACED):
        objects.create(op.get_bind(), name, down_revision)
    if roles_exist():
        owned_by_admin("VIEW", "request_attempts")
        op.execute(f"GRANT SELECT ON request_attempts TO {', '.join(READERS)}")
    op.execute("DROP TRIGGER signals_open_first_attempts ON signals")
    op.execute("DROP FUNCTION ackstore_open_first_attempts()")
    op.execute("DELETE FROM attempts WHERE attempt = 1")
    op.drop_constraint(op.f("ck_attempts_attempt"), "attempts", type_="check")
    op.create_check_constraint(op.f("ck_attempts_attempt"), "attempts", "attempt >= 2")
    op.create_foreign_key(op.f("fk_attempts_signal_id_signals"), "attempts", "signals", ["signal_id"], ["id"],
                          ondelete="CASCADE")
