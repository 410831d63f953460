-- request_acks as migration 0018 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW request_acks AS
SELECT k.id, k.signal_id, k.attempt, k.label, k.status, k.payload, k.headers, k.issuer, k.weak, k.received_at,
       decided_disposition(k.disposition, k.received_at, a.deadline_at, r.cause) AS disposition, k.reason
FROM acks k
LEFT JOIN attempts a ON a.signal_id = k.signal_id AND a.attempt = k.attempt
LEFT JOIN request_results r ON r.signal_id = k.signal_id AND r.attempt = k.attempt
UNION ALL
SELECT NULL::bigint, b.signal_id, b.attempt, b.label, b.status, b.payload, b.headers, b.issuer, b.weak,
       b.received_at, b.disposition, NULL::text
FROM builtin_acks b;
