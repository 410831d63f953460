-- Statements of carrying settlements out (ackstore/ledger/settlements.py), used by connectors.
-- Values are bind parameters.

-- name: undone
-- Decisions of this source not carried out yet (the partial index holds only those): which
-- signal and attempt, the decision, whether its message was held for it (it requested acks),
-- and whether a result is to be published to its reply-to. Narrow rows: this runs every poll.
-- Each undone settlement's signal is looked up by its key (the lateral read is never turned into a
-- join): joined, the planner could read every signal the source ever stored when its statistics
-- said there were few (a young ledger's), and the poll's cost grew with the history (decisions #140).
-- The attempt's labels with it: attempt 1's the signal's, a redelivery's its row (decisions #148).
SELECT st.signal_id, st.attempt, st.decision,
       s.requested_acks <> '{}' AS held_for_decision,
       s.response_required AND s.headers ? 'reply-to' AS wants_reply
FROM settlements st
CROSS JOIN LATERAL (
    SELECT s.response_required, s.headers,
           attempt_value(st.attempt, s.requested_acks, re.requested_acks) AS requested_acks
    FROM signals s
    LEFT JOIN attempts re ON re.signal_id = s.id AND redelivery_attempt(re.attempt) AND re.attempt = st.attempt
    WHERE s.id = st.signal_id AND s.source = :source AND attempt_found(st.attempt, re.signal_id IS NOT NULL) OFFSET 0
) AS s
WHERE st.carried_out_at IS NULL

-- name: replies
-- What publishing the results of these (signal, attempt) pairs needs.
SELECT s.id AS signal_id, s.correlation_id, s.thing_id, s.channel, s.topic, s.path,
       s.headers ->> 'reply-to' AS reply_to, r.status, r.body, r.cause, r.ack_statuses
FROM unnest(CAST(:signal_ids AS bigint[]), CAST(:attempts AS integer[])) AS d(signal_id, attempt)
JOIN signals s ON s.id = d.signal_id
JOIN request_answers r ON r.signal_id = d.signal_id AND r.attempt = d.attempt

-- name: record
-- Decisions carried out now (the function record_carried_out). :held — the connector holds
-- these deliveries: every one is returned (decisions #33); otherwise those recorded now.
-- :carried_out_as — what the transport did instead of the decision (decisions #99), or NULL.
SELECT record_carried_out(CAST(:signal_ids AS bigint[]), CAST(:attempts AS integer[]), CAST(:held AS boolean),
                          CAST(:carried_out_as AS text))

-- name: record_latest
-- Redelivered copies settled from their signals' decisions: the newest attempt's settlement of
-- each, recorded unless it was; the settlements recorded now, with their decisions.
SELECT signal_id, decision FROM record_latest_carried_out(CAST(:signal_ids AS bigint[]))

