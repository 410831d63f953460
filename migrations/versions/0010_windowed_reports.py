"""the windowed reports: latency, watermarks, late acks, labels

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 12:00:00

* ``ix_signals_received_at`` (BRIN): the window every windowed report reads — signals arrive in
  time order, so a block range index of a few pages finds a window's signals.
* Functions (schema.REPORT_FUNCTIONS): ``needs_transport_settlement``, ``settlement_state``, the
  window ``signals_received``, each signal's path ``signal_paths``, and the reports
  ``report_latency``, ``report_watermarks``, ``report_unsettled``, ``report_late_acks`` and
  ``report_labels``; the report views call ``needs_transport_settlement`` instead of spelling
  it out. EXECUTE on functions is PUBLIC's by default; they read as their caller, and
  the reporter may read every table they name.
"""

from __future__ import annotations

from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

# Frozen copies of schema.REPORT_FUNCTIONS as of this revision (a migration must not follow the
# module); tests/test_migrations.py compares them. In order: each after those it calls.
FUNCTIONS: dict[str, str] = {
    # Whether a signal's source needs a transport settlement (B.9): a connection's, not the API's or
    # the CLI's. ackstore.rules.settlement.needs_transport_settlement, in SQL (a test compares them).
    "needs_transport_settlement": """
CREATE FUNCTION needs_transport_settlement(api text, source text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT api = 'connectivity' AND source NOT IN ('api', 'cli')
$$""",
    # Where a signal's current attempt stands on its way to settlement: 'settled' (answered, for
    # the API and the CLI; for a connection, acked or rejected on the broker), else why not —
    # 'undecided', 'settlement undecided', 'redeliver', 'dead-letter', 'not carried out'.
    "settlement_state": """
CREATE FUNCTION settlement_state(needs_transport boolean, decided boolean, decision text,
                                 carried_out_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN NOT decided THEN 'undecided'
            WHEN NOT needs_transport THEN 'settled'
            WHEN decision IS NULL THEN 'settlement undecided'
            WHEN decision IN ('redeliver', 'dead-letter') THEN decision
            WHEN carried_out_at IS NULL THEN 'not carried out'
            ELSE 'settled' END
$$""",
    # A signal's current attempt (the view current_attempts), reached by the signal's key: a join
    # with the view over a window of thousands is planned as a hash join over every attempt.
    "current_attempt_of": """
CREATE FUNCTION current_attempt_of(signal bigint)
RETURNS SETOF attempts LANGUAGE sql STABLE AS $$
SELECT a.* FROM attempts a WHERE a.signal_id = signal ORDER BY a.attempt DESC LIMIT 1
$$""",
    # The window every windowed report reads: signals received in [since, until), of one source or all.
    # MATERIALIZED: found by the received_at index on its own — left to the whole statement, a
    # report's ORDER BY and LIMIT make an index in that order look cheaper, read from the start.
    "signals_received": """
CREATE FUNCTION signals_received(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (id bigint, source text, source_message_id text, correlation_id text, api text,
               received_at timestamptz, response_required boolean, timeout_ms bigint)
LANGUAGE sql STABLE AS $$
WITH window_signals AS MATERIALIZED (
    SELECT s.id, s.source, s.source_message_id, s.correlation_id, s.api, s.received_at, s.response_required,
           s.timeout_ms
    FROM signals s
    WHERE s.received_at >= since AND s.received_at < until AND (only_source IS NULL OR s.source = only_source)
)
SELECT w.id, w.source, w.source_message_id, w.correlation_id, w.api, w.received_at, w.response_required,
       w.timeout_ms
FROM window_signals w
$$""",
    # Each signal of the window on its path: its current attempt's decision and settlement.
    "signal_paths": """
CREATE FUNCTION signal_paths(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (signal_id bigint, source text, source_message_id text, correlation_id text,
               received_at timestamptz, attempt integer, decided_at timestamptz, settlement_decided_at timestamptz,
               carried_out_at timestamptz, settled text)
LANGUAGE sql STABLE AS $$
SELECT s.id, s.source, s.source_message_id, s.correlation_id, s.received_at, a.attempt, r.decided_at,
       st.decided_at, st.carried_out_at,
       settlement_state(needs_transport_settlement(s.api, s.source), r.decided_at IS NOT NULL, st.decision,
                        st.carried_out_at)
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL current_attempt_of(s.id) a
LEFT JOIN LATERAL (SELECT x.decided_at FROM request_results x
                   WHERE x.signal_id = a.signal_id AND x.attempt = a.attempt LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT x.decision, x.decided_at, x.carried_out_at FROM settlements x
                   WHERE needs_transport_settlement(s.api, s.source)  -- else there is none: no look-up
                     AND x.signal_id = a.signal_id AND x.attempt = a.attempt LIMIT 1) st ON true
$$""",
    # Per source and time bucket (by received_at, from midnight UTC): how long the signals took
    # from one checkpoint to the next — p50, p95 and p99 in seconds over those that reached both;
    # ``signals`` counts the bucket's signals, ``measured`` those that reached both checkpoints.
    # A measure no signal reached is left out, except received_to_decided. Grouped once per bucket
    # (one sort per measure), then one row per measure.
    "report_latency": """
CREATE FUNCTION report_latency(since timestamptz, until timestamptz, bucket interval, only_source text)
RETURNS TABLE (source text, bucket_start timestamptz, measure text, signals bigint, measured bigint,
               p50 double precision, p95 double precision, p99 double precision)
LANGUAGE sql STABLE AS $$
WITH spans AS (
    SELECT p.source, date_bin(bucket, p.received_at, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS bucket_start,
           extract(epoch FROM p.decided_at - p.received_at)::float8 AS received_to_decided,
           extract(epoch FROM p.settlement_decided_at - p.decided_at)::float8 AS decided_to_settlement_decided,
           extract(epoch FROM p.carried_out_at - p.decided_at)::float8 AS decided_to_carried_out,
           extract(epoch FROM p.carried_out_at - p.received_at)::float8 AS received_to_carried_out
    FROM signal_paths(since, until, only_source) p
), per_bucket AS (
    SELECT x.source, x.bucket_start, count(*) AS signals,
           count(x.received_to_decided) AS n1,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.received_to_decided) AS q1,
           count(x.decided_to_settlement_decided) AS n2,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.decided_to_settlement_decided) AS q2,
           count(x.decided_to_carried_out) AS n3,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.decided_to_carried_out) AS q3,
           count(x.received_to_carried_out) AS n4,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.received_to_carried_out) AS q4
    FROM spans x
    GROUP BY x.source, x.bucket_start
)
SELECT b.source, b.bucket_start, m.measure, b.signals, m.measured, m.q[1], m.q[2], m.q[3]
FROM per_bucket b
CROSS JOIN LATERAL (VALUES (1, 'received_to_decided', b.n1, b.q1), (2, 'decided_to_settlement_decided', b.n2, b.q2),
                           (3, 'decided_to_carried_out', b.n3, b.q3), (4, 'received_to_carried_out', b.n4, b.q4)
) AS m(n, measure, measured, q)
WHERE m.n = 1 OR m.measured > 0
ORDER BY b.source, b.bucket_start, m.n
$$""",
    # Cumulative acknowledgement per source (as AMPS and Solace report it), within the window: the
    # last signal (in received order) up to which every signal of the source is settled, and how
    # many are not — all of them after it. report_unsettled lists those.
    "report_watermarks": """
CREATE FUNCTION report_watermarks(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (source text, signals bigint, settled bigint, unsettled bigint, watermark_signal_id bigint,
               watermark_message_id text, watermark_received_at timestamptz)
LANGUAGE sql STABLE AS $$
WITH paths AS MATERIALIZED (
    SELECT p.signal_id, p.source, p.settled = 'settled' AS settled FROM signal_paths(since, until, only_source) p
), per_source AS (
    SELECT p.source, count(*) AS signals, count(*) FILTER (WHERE p.settled) AS settled,
           min(p.signal_id) FILTER (WHERE NOT p.settled) AS first_unsettled
    FROM paths p
    GROUP BY p.source
), marks AS (  -- a second pass, whatever the number of sources
    SELECT f.source, max(p.signal_id) AS signal_id
    FROM per_source f
    JOIN paths p ON p.source = f.source AND (f.first_unsettled IS NULL OR p.signal_id < f.first_unsettled)
    GROUP BY f.source
)
SELECT f.source, f.signals, f.settled, f.signals - f.settled, m.signal_id, s.source_message_id, s.received_at
FROM per_source f
LEFT JOIN marks m ON m.source = f.source
LEFT JOIN signals s ON s.id = m.signal_id
ORDER BY f.source
$$""",
    # The signals of the window not settled, by source in received order, with why.
    "report_unsettled": """
CREATE FUNCTION report_unsettled(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (source text, signal_id bigint, correlation_id text, source_message_id text, received_at timestamptz,
               attempt integer, why text)
LANGUAGE sql STABLE AS $$
SELECT p.source, p.signal_id, p.correlation_id, p.source_message_id, p.received_at, p.attempt, p.settled
FROM signal_paths(since, until, only_source) p
WHERE p.settled <> 'settled'
ORDER BY p.source, p.signal_id
$$""",
    # Acks of the window's signals that came after their attempt was decided — or after its deadline,
    # when the deadline decided it (builtin_disposition's two clauses): how late, what was answered,
    # and what the attempt had counted, for ackstore.rules.aggregation to say what the ack would
    # have changed (ackstore/ledger/reports.py).
    "report_late_acks": """
CREATE FUNCTION report_late_acks(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (signal_id bigint, correlation_id text, source text, attempt integer, label text, status smallint,
               issuer text, weak boolean, received_at timestamptz, late_by interval, answered smallint, cause text,
               api text, requested_acks text[], response_required boolean, timeout_ms bigint, counted jsonb)
LANGUAGE sql STABLE AS $$
SELECT s.id, s.correlation_id, s.source, k.attempt, k.label, k.status, k.issuer, k.weak, k.received_at,
       k.received_at - LEAST(r.decided_at, CASE WHEN r.cause IN ('deadline', 'error') THEN a.deadline_at END),
       r.status, r.cause, s.api, a.requested_acks, s.response_required, s.timeout_ms, c.counted
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL (SELECT x.* FROM request_acks x WHERE x.signal_id = s.id AND x.disposition = 'late' OFFSET 0) k
CROSS JOIN LATERAL (SELECT x.deadline_at, x.requested_acks FROM attempts x
                    WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt LIMIT 1) a
CROSS JOIN LATERAL (SELECT x.decided_at, x.status, x.cause FROM request_results x
                    WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt LIMIT 1) r
CROSS JOIN LATERAL (
    SELECT COALESCE(jsonb_agg(jsonb_build_object('label', x.label, 'status', x.status, 'weak', x.weak)
                              ORDER BY x.received_at), '[]'::jsonb) AS counted
    FROM request_acks x WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt AND x.disposition = 'counted'
) c
ORDER BY k.received_at, s.id, k.label
$$""",
    # Per label and issuer, over the decided attempts of the window that requested the label (not
    # those a failed command decided: it discards every ack, A.2.7): how each was answered — the
    # status the decision counted, or the ack counted, else 408 (none arrived: issuer '(none
    # arrived)') — and the p95 of the time from the attempt's opening to its counted ack (0 for a
    # fact that came before the attempt opened).
    "report_labels": """
CREATE FUNCTION report_labels(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (label text, issuer text, answered bigint, ok bigint, weak bigint, client_errors bigint,
               timeouts bigint, server_errors bigint, p95_seconds double precision)
LANGUAGE sql STABLE AS $$
SELECT e.label, COALESCE(k.issuer, '(none arrived)'), count(*),
       count(*) FILTER (WHERE e.status BETWEEN 200 AND 299 AND NOT COALESCE(k.weak, false)),
       count(*) FILTER (WHERE k.weak),
       count(*) FILTER (WHERE e.status BETWEEN 400 AND 499 AND e.status <> 408),
       count(*) FILTER (WHERE e.status = 408),
       count(*) FILTER (WHERE e.status >= 500),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM k.received_at
                                                                         - LEAST(a.opened_at, k.received_at))::float8)
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL (SELECT x.signal_id, x.attempt, x.ack_statuses FROM request_results x
                    WHERE x.signal_id = s.id AND x.cause <> 'error' OFFSET 0) r
CROSS JOIN LATERAL (SELECT x.opened_at, x.requested_acks FROM attempts x
                    WHERE x.signal_id = r.signal_id AND x.attempt = r.attempt LIMIT 1) a
CROSS JOIN LATERAL unnest(a.requested_acks) AS l(label)
LEFT JOIN LATERAL (SELECT x.issuer, x.weak, x.received_at, x.status FROM request_acks x
                   WHERE x.signal_id = r.signal_id AND x.attempt = r.attempt AND x.label = l.label
                     AND x.disposition = 'counted'
                   LIMIT 1) k ON true
CROSS JOIN LATERAL (SELECT l.label, COALESCE((r.ack_statuses ->> l.label)::integer, k.status, 408) AS status) e
GROUP BY 1, 2
ORDER BY 1, 2
$$""",
}


# Frozen copies of schema.REPORT_VIEWS["report_settlement_status"] and ["report_qos1_audit"] as of
# this revision: which signals need a transport settlement is now the function above, not spelled
# out in each view. The views as 0009 left them follow by replacing the call with its body.
SETTLEMENT_STATUS = """
SELECT s.source, 'pending decision'::text AS status, NULL::text AS decision,
       count(*) AS requests, min(s.received_at) AS oldest
FROM (SELECT signal_id FROM queue_decide
      UNION SELECT signal_id FROM awaiting_validation()
      UNION SELECT signal_id FROM queue_settle) p
JOIN signals s ON s.id = p.signal_id
WHERE needs_transport_settlement(s.api, s.source)
GROUP BY s.source
UNION ALL
SELECT s.source, CASE WHEN st.carried_out_at IS NULL THEN 'decided' ELSE 'carried out' END,
       st.decision, count(*), min(st.decided_at)
FROM settlements st
JOIN signals s ON s.id = st.signal_id
GROUP BY s.source, 2, st.decision
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
        WHERE needs_transport_settlement(s.api, s.source)
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
SPELLED_OUT = "s.api = 'connectivity' AND s.source NOT IN ('api', 'cli')"
VIEWS_0009 = {
    "report_settlement_status": SETTLEMENT_STATUS.replace("needs_transport_settlement(s.api, s.source)", SPELLED_OUT),
    "report_qos1_audit": QOS1_AUDIT.replace("needs_transport_settlement(s.api, s.source)", SPELLED_OUT),
}


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


def _owned_by_admin(signature: str) -> None:
    """New objects belong to the admin role, as 0006 made every object (when its user may)."""
    op.execute(f"""
DO $$ BEGIN
  IF pg_has_role(current_user, 'ackstore_admin', 'MEMBER') THEN ALTER FUNCTION {signature} OWNER TO ackstore_admin; END IF;
END $$""")


def upgrade() -> None:
    op.execute("CREATE INDEX ix_signals_received_at ON signals USING brin (received_at)")
    for name, ddl in FUNCTIONS.items():
        op.execute(ddl)
        _owned_by_admin(f"{name}({SIGNATURES[name]})")
    op.execute(f"CREATE OR REPLACE VIEW report_settlement_status AS {SETTLEMENT_STATUS}")
    op.execute(f"CREATE OR REPLACE VIEW report_qos1_audit AS {QOS1_AUDIT}")


def downgrade() -> None:
    for view, query in VIEWS_0009.items():  # before the function they call goes
        op.execute(f"CREATE OR REPLACE VIEW {view} AS {query}")
    for name, signature in SIGNATURES.items():  # callers first
        op.execute(f"DROP FUNCTION {name}({signature})")
    op.execute("DROP INDEX ix_signals_received_at")
