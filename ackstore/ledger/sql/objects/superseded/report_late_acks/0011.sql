-- report_late_acks as migration 0011 defined it (superseded: the current definition is in objects/).
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
CROSS JOIN LATERAL (SELECT x.deadline_at, x.requested_acks FROM attempts x
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
