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

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

READERS = ("ackstore_ingest", "ackstore_pipeline", "ackstore_reporter")

# Frozen copies of schema.LEDGER_VIEWS / REPORT_VIEWS / LEDGER_FUNCTIONS as of this revision (a
# migration must not follow the module); tests/test_migrations.py compares them with the module.
CURRENT_ATTEMPTS = """
SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at
FROM attempts a
WHERE NOT EXISTS (SELECT 1 FROM attempts later WHERE later.signal_id = a.signal_id AND later.attempt > a.attempt)
"""
BUILTIN_ACKS = """
SELECT f.signal_id, a.attempt, f.label, f.status, f.payload,
       jsonb_build_object('correlation-id', f.correlation_id)
           || CASE WHEN f.weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END AS headers,
       'ackstore'::text AS issuer, f.weak, f.fact_at AS received_at, d.disposition
FROM builtin_facts f
JOIN attempts a ON a.signal_id = f.signal_id AND f.label = ANY (a.requested_acks)
LEFT JOIN request_results r ON r.signal_id = a.signal_id AND r.attempt = a.attempt
LEFT JOIN attempts later ON later.signal_id = a.signal_id AND later.attempt = a.attempt + 1
CROSS JOIN LATERAL (SELECT builtin_disposition(f.fact_at, a.opened_at, a.deadline_at, r.decided_at, r.cause,
                                               later.opened_at) AS disposition) d
WHERE d.disposition IS NOT NULL
"""
QOS1_AUDIT = """
SELECT signal_id, correlation_id, source, source_message_id, attempt, stuck_at, detail,
       received_at, now() - received_at AS age
FROM (
    SELECT DISTINCT ON (w.signal_id) w.signal_id, s.correlation_id, s.source, s.source_message_id,
           w.attempt, w.stuck_at, w.detail, s.received_at
    FROM (
        SELECT q.signal_id, 1 AS attempt, 1 AS stage, 'apply: the twin change is not persisted yet'::text AS stuck_at,
               NULL::text AS detail
        FROM queue_apply q
        UNION ALL
        SELECT q.signal_id, q.attempt, 2, 'decide: waiting for acks or the deadline',
               'missing: ' || COALESCE((
                   SELECT string_agg(l.label, ', ' ORDER BY l.n)
                   FROM unnest(a.requested_acks) WITH ORDINALITY AS l(label, n)
                   WHERE NOT EXISTS (SELECT 1 FROM request_acks k
                                     WHERE k.signal_id = q.signal_id AND k.attempt = q.attempt
                                       AND k.label = l.label AND k.disposition = 'counted')), 'nothing')
               || '; deadline ' || to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
        FROM queue_decide q
        JOIN attempts a ON a.signal_id = q.signal_id AND a.attempt = q.attempt
        UNION ALL
        SELECT q.signal_id, q.attempt, 3, 'validate: decided, waiting for the validation gate', NULL
        FROM awaiting_validation() q
        JOIN signals s ON s.id = q.signal_id
        WHERE s.api = 'connectivity' AND s.source NOT IN ('api', 'cli')
        UNION ALL
        SELECT q.signal_id, q.attempt, 4, 'settle: validated, waiting for a settlement decision', NULL
        FROM queue_settle q
        UNION ALL
        SELECT st.signal_id, st.attempt, 5, 'connector: decided, not carried out yet', st.decision
        FROM settlements st
        WHERE st.carried_out_at IS NULL
    ) w
    JOIN signals s ON s.id = w.signal_id
    ORDER BY w.signal_id, w.stage
) stuck
ORDER BY received_at, signal_id
"""
ACK_ENTRY_HEADERS = """
CREATE FUNCTION ack_entry_headers(headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN headers = '{}' AND weak THEN jsonb_build_object('correlation-id', correlation_id, 'ditto-weak-ack', true)
            WHEN headers = '{}' THEN jsonb_build_object('correlation-id', correlation_id)
            ELSE CASE WHEN headers ->> 'content-type' = 'application/vnd.eclipse.ditto+json'
                      THEN headers - 'requested-acks' - 'content-type' ELSE headers - 'requested-acks' END
                 || jsonb_build_object('correlation-id', correlation_id)
                 || CASE WHEN weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END END
$$"""
REQUEST_ANSWERS = """
SELECT r.signal_id, r.attempt, r.status, r.body,
       COALESCE(r.headers, (s.headers - 'requested-acks')
                           || jsonb_build_object('correlation-id', s.correlation_id, 'response-required', false))
           AS headers,
       r.cause, r.ack_statuses, r.decided_at, r.batch_id
FROM request_results r
LEFT JOIN signals s ON s.id = r.signal_id AND r.headers IS NULL
"""
REFRESH_STATISTICS = """
CREATE FUNCTION refresh_statistics(target text, written bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  known real := (SELECT c.reltuples FROM pg_class c WHERE c.oid = to_regclass(target));
BEGIN
  IF target <> ALL (ARRAY['command_responses', 'things', 'queue_apply', 'queue_index', 'search_index', 'search_things', 'search_marks', 'acks', 'request_results', 'queue_decide', 'settlements', 'queue_settle', 'stage_twin_outcomes', 'stage_search_things', 'stage_search_rows', 'stage_weak_acks', 'stage_results', 'stage_settlements']) THEN
    RAISE EXCEPTION 'refresh_statistics: % is not a table a merge writes', target;
  END IF;
  IF written < 10000 OR (known > 0 AND written * 10 < known) THEN
    RETURN false;
  END IF;
  EXECUTE format('ANALYZE %I', target);
  RETURN true;
END
$$"""
ACK_ENTRY = """
CREATE OR REPLACE FUNCTION ack_entry(status integer, payload jsonb, headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN payload IS NULL
            THEN jsonb_build_object('status', status, 'headers', ack_entry_headers(headers, weak, correlation_id))
            ELSE jsonb_build_object('status', status, 'payload', payload,
                                    'headers', ack_entry_headers(headers, weak, correlation_id)) END
$$"""

# 0007's, for the downgrade.
REQUEST_ATTEMPTS_0007 = """
SELECT s.id AS signal_id, 1 AS attempt, s.requested_acks, s.received_at AS opened_at, s.deadline_at
FROM signals s
UNION ALL
SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at
FROM attempts a
"""
CURRENT_ATTEMPTS_0007 = """
SELECT r.signal_id, r.attempt, r.requested_acks, r.opened_at, r.deadline_at
FROM request_attempts r
WHERE NOT EXISTS (SELECT 1 FROM attempts later WHERE later.signal_id = r.signal_id AND later.attempt > r.attempt)
"""
BUILTIN_ACKS_0007 = BUILTIN_ACKS.replace("JOIN attempts a ON", "JOIN request_attempts a ON")
QOS1_AUDIT_0007 = QOS1_AUDIT.replace("JOIN attempts a ON", "JOIN request_attempts a ON")
ACK_ENTRY_0007 = """
CREATE OR REPLACE FUNCTION ack_entry(status integer, payload jsonb, headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE AS $$
SELECT jsonb_build_object('status', status)
       || CASE WHEN payload IS NOT NULL THEN jsonb_build_object('payload', payload) ELSE '{}'::jsonb END
       || jsonb_build_object('headers',
              CASE WHEN headers ->> 'content-type' = 'application/vnd.eclipse.ditto+json'
                   THEN headers - 'requested-acks' - 'content-type' ELSE headers - 'requested-acks' END
              || jsonb_build_object('correlation-id', correlation_id)
              || CASE WHEN weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END)
$$"""

# Attempt 1 of every signal, written with it: one set-based insert per statement.
FIRST_ATTEMPTS = """
CREATE FUNCTION ackstore_open_first_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at)
  SELECT s.id, 1, s.requested_acks, s.received_at, s.deadline_at FROM received s;
  RETURN NULL;
END $$;
CREATE TRIGGER signals_open_first_attempts AFTER INSERT ON signals REFERENCING NEW TABLE AS received
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_open_first_attempts()
"""


def _owned_by_admin(kind: str, name: str) -> None:
    """New objects belong to the admin role, as 0006 made every object (when its user may)."""
    op.execute(f"""
DO $$ BEGIN
  IF pg_has_role(current_user, 'ackstore_admin', 'MEMBER') THEN ALTER {kind} {name} OWNER TO ackstore_admin; END IF;
END $$""")


def _roles_exist() -> bool:
    found = op.get_bind().exec_driver_sql(
        "SELECT count(*) FROM pg_roles WHERE rolname = ANY (%(r)s)", {"r": [*READERS, "ackstore_admin"]})
    return found.scalar_one() == len(READERS) + 1


def upgrade() -> None:
    op.drop_constraint(op.f("fk_attempts_signal_id_signals"), "attempts", type_="foreignkey")
    op.drop_constraint(op.f("ck_attempts_attempt"), "attempts", type_="check")
    op.create_check_constraint(op.f("ck_attempts_attempt"), "attempts", "attempt > 0")
    op.execute("INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at) "
               "SELECT s.id, 1, s.requested_acks, s.received_at, s.deadline_at FROM signals s")
    op.execute(FIRST_ATTEMPTS)
    op.execute(f"CREATE OR REPLACE VIEW current_attempts AS {CURRENT_ATTEMPTS}")
    op.execute(f"CREATE OR REPLACE VIEW builtin_acks AS {BUILTIN_ACKS}")
    op.execute(f"CREATE OR REPLACE VIEW report_qos1_audit AS {QOS1_AUDIT}")
    op.execute("DROP VIEW request_attempts")
    op.alter_column("request_results", "headers", nullable=True)
    op.execute(f"CREATE VIEW request_answers AS {REQUEST_ANSWERS}")
    op.execute(ACK_ENTRY_HEADERS)
    op.execute(ACK_ENTRY)
    op.execute("ALTER FUNCTION builtin_disposition(timestamptz, timestamptz, timestamptz, timestamptz, text, timestamptz) PARALLEL SAFE")
    op.execute(REFRESH_STATISTICS)
    op.execute("REVOKE EXECUTE ON FUNCTION refresh_statistics(text, bigint) FROM PUBLIC")
    op.execute("ALTER TABLE request_results ALTER COLUMN body SET STATISTICS 0, "
               "ALTER COLUMN headers SET STATISTICS 0, ALTER COLUMN ack_statuses SET STATISTICS 0")
    if _roles_exist():
        _owned_by_admin("FUNCTION", "ackstore_open_first_attempts()")
        _owned_by_admin("FUNCTION", "ack_entry_headers(jsonb, boolean, text)")
        _owned_by_admin("FUNCTION", "refresh_statistics(text, bigint)")  # it analyzes as its owner
        op.execute("GRANT EXECUTE ON FUNCTION refresh_statistics(text, bigint) TO ackstore_pipeline")
        _owned_by_admin("VIEW", "request_answers")
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
    op.execute(ACK_ENTRY_0007)
    op.execute("ALTER FUNCTION builtin_disposition(timestamptz, timestamptz, timestamptz, timestamptz, text, timestamptz) PARALLEL UNSAFE")
    op.execute("DROP FUNCTION ack_entry_headers(jsonb, boolean, text)")
    op.execute(f"CREATE VIEW request_attempts AS {REQUEST_ATTEMPTS_0007}")
    op.execute(f"CREATE OR REPLACE VIEW current_attempts AS {CURRENT_ATTEMPTS_0007}")
    op.execute(f"CREATE OR REPLACE VIEW builtin_acks AS {BUILTIN_ACKS_0007}")
    op.execute(f"CREATE OR REPLACE VIEW report_qos1_audit AS {QOS1_AUDIT_0007}")
    if _roles_exist():
        _owned_by_admin("VIEW", "request_attempts")
        op.execute(f"GRANT SELECT ON request_attempts TO {', '.join(READERS)}")
    op.execute("DROP TRIGGER signals_open_first_attempts ON signals")
    op.execute("DROP FUNCTION ackstore_open_first_attempts()")
    op.execute("DELETE FROM attempts WHERE attempt = 1")
    op.drop_constraint(op.f("ck_attempts_attempt"), "attempts", type_="check")
    op.create_check_constraint(op.f("ck_attempts_attempt"), "attempts", "attempt >= 2")
    op.create_foreign_key(op.f("fk_attempts_signal_id_signals"), "attempts", "signals", ["signal_id"], ["id"],
                          ondelete="CASCADE")
