-- Statements of the store API (ackstore/ledger/store.py). Values are bind parameters.
-- A signal's current attempt is its newest row in `attempts`, or 1 (the signal itself).

-- name: current_request
-- The request an ack is for: the signal, share-locked so that deciding it waits for this ack,
-- with its current attempt and the labels that attempt requested.
SELECT s.id, s.thing_id, s.channel, COALESCE(a.attempt, 1) AS attempt,
       COALESCE(a.requested_acks, s.requested_acks) AS requested_acks
FROM signals s
LEFT JOIN LATERAL (SELECT x.attempt, x.requested_acks FROM attempts x
                   WHERE x.signal_id = s.id ORDER BY x.attempt DESC LIMIT 1) a ON true
WHERE s.correlation_id = :correlation_id
FOR SHARE OF s

-- name: latest_result
-- What the requester of a signal is told: the result of its current attempt (NULL: undecided).
SELECT s.id, r.status, r.body, r.headers
FROM signals s
LEFT JOIN LATERAL (SELECT max(x.attempt) AS attempt FROM attempts x WHERE x.signal_id = s.id) a ON true
LEFT JOIN request_results r ON r.signal_id = s.id AND r.attempt = COALESCE(a.attempt, 1)
WHERE s.correlation_id = :correlation_id

-- name: retransmitted
-- A submission whose (source, message id) is stored: its signal, locked against a concurrent
-- redelivery, with the current attempt, its labels, result and settlement decision.
SELECT s.id, s.correlation_id, s.timeout_ms, COALESCE(a.attempt, 1) AS attempt,
       COALESCE(a.requested_acks, s.requested_acks) AS requested_acks,
       r.ack_statuses, st.decision
FROM signals s
LEFT JOIN LATERAL (SELECT x.attempt, x.requested_acks FROM attempts x
                   WHERE x.signal_id = s.id ORDER BY x.attempt DESC LIMIT 1) a ON true
LEFT JOIN request_results r ON r.signal_id = s.id AND r.attempt = COALESCE(a.attempt, 1)
LEFT JOIN settlements st ON st.signal_id = s.id AND st.attempt = COALESCE(a.attempt, 1)
WHERE s.source = :source AND s.source_message_id = :source_message_id
FOR UPDATE OF s

-- name: open_attempt
-- The next attempt of a redelivered signal: the labels to request again, a deadline from now.
INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at)
VALUES (:signal_id, :attempt, CAST(:requested_acks AS text[]), now(),
        now() + make_interval(secs => CAST(:timeout_ms AS double precision) / 1000.0))

-- name: enqueue_attempt
-- The sweep decides the new attempt (the previous one left the queue when it was decided).
INSERT INTO queue_decide (signal_id, attempt) VALUES (:signal_id, :attempt)
ON CONFLICT (signal_id) DO UPDATE SET attempt = EXCLUDED.attempt

-- name: carry_builtin_facts
-- What was persisted stays persisted (A.2.10): a built-in label requested again whose fact is
-- already in the ledger (the twin change, the index write) counts for the new attempt with
-- the ack that reported it, at the fact's own time.
INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, disposition)
SELECT DISTINCT ON (a.label) a.signal_id, :attempt, a.label, a.status, a.payload, a.headers,
       a.issuer, a.weak, a.received_at, 'counted'
FROM acks a
WHERE a.signal_id = :signal_id AND a.issuer = :builtin_issuer
  AND a.label = ANY (CAST(:labels AS text[]))
ORDER BY a.label, a.id

-- name: attempts_of
-- Every attempt of a signal with its result and settlement, for `show`.
SELECT n.attempt, n.requested_acks, n.opened_at, n.deadline_at,
       r.status, r.cause, r.decided_at, st.decision, st.decided_at AS settlement_decided_at,
       st.carried_out_at
FROM (SELECT 1 AS attempt, s.requested_acks, s.received_at AS opened_at, s.deadline_at
      FROM signals s WHERE s.id = :signal_id
      UNION ALL
      SELECT a.attempt, a.requested_acks, a.opened_at, a.deadline_at
      FROM attempts a WHERE a.signal_id = :signal_id) n
LEFT JOIN request_results r ON r.signal_id = :signal_id AND r.attempt = n.attempt
LEFT JOIN settlements st ON st.signal_id = :signal_id AND st.attempt = n.attempt
ORDER BY n.attempt
