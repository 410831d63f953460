-- late_builtin_acks as migration 0025 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION late_builtin_acks(signal bigint)
RETURNS TABLE (attempt integer, label text, decided_seq bigint, fact_seq bigint)
LANGUAGE sql STABLE AS $$
SELECT a.attempt, f.label, r.seq, f.seq
FROM builtin_fact_times(late_builtin_acks.signal) f
JOIN attempts a ON a.signal_id = late_builtin_acks.signal AND f.label = ANY (a.requested_acks)
JOIN request_results r ON r.signal_id = a.signal_id AND r.attempt = a.attempt
LEFT JOIN attempts later ON later.signal_id = a.signal_id AND later.attempt = a.attempt + 1
WHERE builtin_disposition(f.fact_at, a.opened_at, a.deadline_at, r.decided_at, r.cause, later.opened_at) = 'late'
$$;
