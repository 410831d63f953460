-- builtin_acks as migration 0032 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW builtin_acks AS
SELECT f.signal_id, a.attempt, f.label, f.status, f.payload,
       jsonb_build_object('correlation-id', f.correlation_id)
           || CASE WHEN f.weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END AS headers,
       'ackstore'::text AS issuer, f.weak, f.fact_at AS received_at, d.disposition
FROM builtin_facts f
JOIN attempts a ON a.signal_id = f.signal_id AND f.label = ANY (a.requested_acks)
LEFT JOIN request_results r ON r.signal_id = a.signal_id AND r.attempt = a.attempt
LEFT JOIN attempts later ON later.signal_id = a.signal_id AND redelivery_attempt(later.attempt)
    AND later.attempt = a.attempt + 1
CROSS JOIN LATERAL (SELECT builtin_disposition(f.fact_at, a.opened_at, a.deadline_at, r.decided_at, r.cause,
                                               later.opened_at) AS disposition) d
WHERE d.disposition IS NOT NULL;
