-- The late-acks report: acks that came after their attempt was decided.

-- name: report_late_acks
-- Acks of the window's signals that came after their attempt was decided — or after its deadline,
-- when the deadline decided it (builtin_disposition's two clauses): how late, what was answered,
-- and what the attempt had counted, for ackstore.rules.aggregation to say what the ack would
-- have changed (ackstore/ledger/reports.py). The attempt: signal_attempts (decisions #148).
-- version: 0036
CREATE OR REPLACE FUNCTION report_late_acks(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (signal_id bigint, correlation_id text, source text, attempt integer, label text, status smallint,
               issuer text, weak boolean, received_at timestamptz, late_by interval, answered smallint, cause text,
               api text, requested_acks text[], response_required boolean, timeout_ms bigint, counted jsonb)
LANGUAGE sql STABLE AS $$
SELECT s.id, s.correlation_id, s.source, k.attempt, k.label, k.status, k.issuer, k.weak, k.received_at,
       k.received_at - LEAST(r.decided_at, CASE WHEN judged_by_deadline(r.cause) THEN a.deadline_at END),
       r.status, r.cause, s.api, a.requested_acks, s.response_required, s.timeout_ms, c.counted
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL (SELECT x.* FROM request_acks x WHERE x.signal_id = s.id AND x.disposition = 'late' OFFSET 0) k
CROSS JOIN LATERAL (SELECT x.deadline_at, x.requested_acks FROM signal_attempts x
                    WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt LIMIT 1) a
CROSS JOIN LATERAL (SELECT x.decided_at, x.status, x.cause FROM request_results x
                    WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt LIMIT 1) r
CROSS JOIN LATERAL (
    SELECT COALESCE(jsonb_agg(jsonb_build_object('label', x.label, 'status', x.status, 'weak', x.weak)
                              ORDER BY x.received_at), '[]'::jsonb) AS counted
    FROM request_acks x WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt AND x.disposition = counted()
) c
ORDER BY k.received_at, s.id, k.label
$$;
