-- request_acks as migration 0007 defined it (superseded by migration 0018: a stored ack's disposition as decided: late is derived, no longer flagged by the sweep).
CREATE OR REPLACE VIEW request_acks AS
SELECT k.id, k.signal_id, k.attempt, k.label, k.status, k.payload, k.headers, k.issuer, k.weak, k.received_at,
       k.disposition, k.reason
FROM acks k
UNION ALL
SELECT NULL::bigint, b.signal_id, b.attempt, b.label, b.status, b.payload, b.headers, b.issuer, b.weak,
       b.received_at, b.disposition, NULL::text
FROM builtin_acks b;
