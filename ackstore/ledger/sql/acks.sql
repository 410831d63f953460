-- Statements that store what subscribers answer (ackstore/ledger/acks.py): acks and live
-- responses. Values are bind parameters. Which ack counts is ackstore.rules.acks.Disposition.

-- name: current_request
-- The request an ack is for: the signal, share-locked so that deciding it waits for this ack,
-- with its current attempt and the labels that attempt requested (the function lock_request).
SELECT r.* FROM lock_request(:correlation_id) r


-- name: is_decided
-- Whether the request (that attempt of the signal) has its result.
SELECT EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = :signal_id AND r.attempt = :attempt)

-- name: insert_ack
-- An ack kept with its disposition (the function store_ack): the disposition stored — a
-- counted one that lost to an earlier ack of its label is kept as a duplicate.
SELECT store_ack(CAST(:signal_id AS bigint), CAST(:attempt AS integer), :label, CAST(:status AS smallint),
                 CAST(:payload AS jsonb), CAST(:headers AS jsonb), :issuer, :disposition, :reason)


-- name: insert_live_response
-- The first live response is the signal's response (the function store_live_response).
SELECT store_live_response(CAST(:signal_id AS bigint))

