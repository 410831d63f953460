-- Statements of the store API (ackstore/ledger/store.py). Values are bind parameters.
-- A signal's current attempt is its newest row in `attempts`, or 1 (the signal itself).

-- name: current_request
-- The request an ack is for: the signal, share-locked so that deciding it waits for this ack,
-- with its current attempt and the labels that attempt requested.
SELECT s.id, s.thing_id, s.channel, s.kind, s.action, s.path, COALESCE(a.attempt, 1) AS attempt,
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
