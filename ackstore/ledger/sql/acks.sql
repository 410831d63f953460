-- Statements that store what subscribers answer (ackstore/ledger/acks.py): acks and live
-- responses. Values are bind parameters. Which ack counts is ackstore.rules.acks.Disposition.

-- name: current_request
-- The request an ack is for: the signal, share-locked so that deciding it waits for this ack,
-- with its current attempt and the labels that attempt requested.
SELECT s.id, s.thing_id, s.channel, s.kind, s.action, s.path, a.attempt, a.requested_acks
FROM signals s
JOIN current_attempts a ON a.signal_id = s.id
WHERE s.correlation_id = :correlation_id
FOR SHARE OF s

-- name: is_decided
-- Whether the request (that attempt of the signal) has its result.
SELECT EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = :signal_id AND r.attempt = :attempt)

-- name: insert_ack
-- An ack kept with its disposition (late, unrequested, duplicate, invalid with why).
INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, disposition, reason)
VALUES (:signal_id, :attempt, :label, :status, CAST(:payload AS jsonb), CAST(:headers AS jsonb), :issuer,
        :disposition, :reason)

-- name: insert_counted_ack
-- The first ack of its label for the request counts; another is refused here (no row returned)
-- by the partial unique index over counted acks (counted() folds into the index's literal, so
-- PostgreSQL infers it).
INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, disposition)
VALUES (:signal_id, :attempt, :label, :status, CAST(:payload AS jsonb), CAST(:headers AS jsonb), :issuer,
        counted())
ON CONFLICT (signal_id, attempt, label) WHERE disposition = counted() DO NOTHING
RETURNING id

-- name: insert_live_response
-- The first live response is the signal's response (a live response never short-circuits).
INSERT INTO command_responses (signal_id, status, payload, is_error)
VALUES (:signal_id, :status, CAST(:payload AS jsonb), false)
ON CONFLICT (signal_id) DO NOTHING
