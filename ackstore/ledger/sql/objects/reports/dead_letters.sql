-- The dead-letters report: the messages a broker will not redeliver, and why (issue 50).

-- name: report_dead_letters
-- The window's signals whose current attempt was settled as dead-letter (its attempts used up,
-- A.2.10): the attempt, what it was answered and why (its cause and the status of each label it
-- counted), when it was decided and carried out (NULL: its connector has not yet). What
-- AckstoreDeadLettersRising points at; ackstore_dead_letters_total counts the carried-out ones.
-- version: 0025
CREATE OR REPLACE FUNCTION report_dead_letters(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (signal_id bigint, correlation_id text, source text, source_message_id text, received_at timestamptz,
               attempt integer, status smallint, cause text, ack_statuses jsonb, decided_at timestamptz,
               carried_out_at timestamptz)
LANGUAGE sql STABLE AS $$
SELECT p.signal_id, p.correlation_id, p.source, p.source_message_id, p.received_at, p.attempt, r.status, r.cause,
       r.ack_statuses, p.decided_at, p.carried_out_at
FROM signal_paths(since, until, only_source) p
CROSS JOIN LATERAL (SELECT x.status, x.cause, x.ack_statuses FROM request_results x
                    WHERE x.signal_id = p.signal_id AND x.attempt = p.attempt LIMIT 1) r
WHERE p.decision = 'dead-letter'
ORDER BY p.received_at, p.signal_id
$$;
