-- Statements that read what the ledger answers and shows about a signal
-- (ackstore/ledger/results.py). A signal's attempts are the view signal_attempts, its current one
-- the view current_attempts (attempt 1 is its signal: decisions #148).

-- name: latest_result
-- What the requester of a signal is told: the result of its current attempt (NULL: undecided).
-- Of one correlation id, or of many at once (the doors' held requests): :correlation_ids. Its
-- cause and acks' statuses are what a socket's answer is made of (wire.result_message).
SELECT s.id, s.correlation_id, s.source, s.source_message_id, r.status, r.body, r.headers, r.cause, r.ack_statuses
FROM signals s
JOIN current_attempts a ON a.signal_id = s.id
LEFT JOIN request_answers r ON r.signal_id = s.id AND r.attempt = a.attempt
WHERE s.correlation_id = ANY (CAST(:correlation_ids AS text[]))

-- name: snapshot
-- `show` reads a signal's parts in one snapshot: a checkpoint written between two reads would
-- show a state its timeline does not have.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: signal
-- The stored signal, for `show`: its row, where it stands (signal_state) and its current
-- attempt's answer (status NULL: undecided) — the correlation id resolved once.
SELECT s.*,
       signal_state(needs_transport_settlement(s.api, s.source), c.is_error, r.status IS NOT NULL, st.decision,
                    st.carried_out_at IS NOT NULL) AS shown_state,
       r.status AS shown_status, r.body AS shown_body, r.headers AS shown_headers
FROM signals s
CROSS JOIN LATERAL current_attempt_of(s.id) a
LEFT JOIN request_answers r ON r.signal_id = s.id AND r.attempt = a.attempt
LEFT JOIN settlements st ON st.signal_id = s.id AND st.attempt = a.attempt
LEFT JOIN command_responses c ON c.signal_id = s.id
WHERE s.correlation_id = :correlation_id

-- name: attempts_of
-- Every attempt of a signal with its result and settlement, for `show`.
SELECT n.attempt, n.requested_acks, n.opened_at, n.deadline_at,
       r.status, r.cause, r.decided_at, st.decision, st.decided_at AS settlement_decided_at,
       st.carried_out_at
FROM signal_attempts n
LEFT JOIN request_results r ON r.signal_id = :signal_id AND r.attempt = n.attempt
LEFT JOIN settlements st ON st.signal_id = :signal_id AND st.attempt = n.attempt
WHERE n.signal_id = :signal_id
ORDER BY n.attempt

-- name: acks_of
-- Every ack of a signal, stored or derived (built-in), for `show`: by attempt, in arrival order.
SELECT k.attempt, k.label, k.status, k.payload, k.issuer, k.weak, k.disposition
FROM request_acks k
WHERE k.signal_id = :signal_id
ORDER BY k.attempt, k.received_at, k.id NULLS LAST, k.label

-- name: timeline
-- Every checkpoint of a signal with its time, in the order it lived them (A.3).
SELECT t.attempt, t.at, t.checkpoint, t.label, t.status, t.detail
FROM signal_timeline t
WHERE t.signal_id = :signal_id
ORDER BY t.at, t.stage, t.attempt, t.label
