-- report_labels as migration 0011 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION report_labels(since timestamptz, until timestamptz, only_source text)
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
                     AND x.disposition = counted()
                   LIMIT 1) k ON true
CROSS JOIN LATERAL (SELECT l.label, COALESCE((r.ack_statuses ->> l.label)::integer, k.status, 408) AS status) e
GROUP BY 1, 2
ORDER BY 1, 2
$$;
