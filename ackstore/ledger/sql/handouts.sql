-- Statements of the hand-outs to subscribers: pull with leases (A.3). Bind parameters are named below.

-- name: now
-- The transaction's clock: the caller's (tests control it) or the database's.
SELECT COALESCE(CAST(:now AS timestamptz), statement_timestamp())

-- name: subscriber
-- The subscriber and the labels its group declared.
SELECT u.id, u.holder, u.channels, u.namespaces, u.filter,
       ARRAY(SELECT d.label FROM declared_labels d WHERE d.holder = u.holder) AS declared
FROM subscribers u
WHERE u.id = :subscriber

-- name: decided_ready
-- Pending hand-outs whose request attempt is decided are closed: never handed out again (the
-- function close_decided_handouts).
SELECT close_decided_handouts(:subscriber, :now)


-- name: ready
-- The subscriber's ready signals, oldest first, each under a new lease (the function lease_ready).
SELECT l.* FROM lease_ready(:subscriber, :now, :limit, CAST(:lease_ms AS bigint)) l


-- name: lock_position
-- One consumer at a time reads the event log for a subscriber; the others wait here.
SELECT lock_event_position(:subscriber)


-- name: events_after
-- The next events of the log after the subscriber's position, with their request's current
-- attempt and its labels.
SELECT e.id AS event_id, e.signal_id, e.thing_id, e.action, e.path, e.value::text AS value,
       a.attempt, a.requested_acks
FROM thing_events e
JOIN current_attempts a ON a.signal_id = e.signal_id
WHERE e.id > :position
ORDER BY e.id
LIMIT :scan

-- name: move_position
-- How far the subscriber has read the event log (handed out or passed over).
SELECT move_event_position(:subscriber, CAST(:position AS bigint))


-- name: requested_now
-- The labels the current attempt of each handed-out signal requests, and whether it is live.
SELECT s.id AS signal_id, s.channel = 'live' AS live, a.requested_acks
FROM signals s
JOIN current_attempts a ON a.signal_id = s.id
WHERE s.id = ANY (:signal_ids)

-- name: live_views
-- The live signals among handed-out ones, as a subscriber's filter sees them.
SELECT s.id AS signal_id, s.kind, s.thing_id, s.action, s.path, s.value::text AS value
FROM signals s
WHERE s.id = ANY (:signal_ids) AND s.channel = 'live'

-- name: close
-- Hand-outs that await no answer (the signal requests none of the group's labels).
SELECT close_handouts(:subscriber, CAST(:signal_ids AS bigint[]), :now)


-- name: messages
-- What the handed-out signals look like to a subscriber: the twin event, or the live signal.
SELECT s.id AS signal_id, s.kind, s.topic, s.thing_id, s.path, s.value, s.value IS NOT NULL AS has_value, s.headers,
       e.action AS event_action, e.path AS event_path, e.value AS event_value, e.revision,
       e.headers AS event_headers, e.created_at AS event_time
FROM signals s
LEFT JOIN thing_events e ON e.signal_id = s.id
WHERE s.id = ANY (:signal_ids)

-- name: live_subscribers
-- Every subscriber of the live channel: a new live signal is fanned out to those it matches.
SELECT id, channels, namespaces, filter FROM subscribers WHERE 'live' = ANY (channels)

-- name: lock_handout
-- The hand-out an ack or live response answers, locked against a concurrent pull.
SELECT h.* FROM lock_handout(:subscriber, CAST(:signal_id AS bigint)) h


-- name: answer
-- The hand-out is answered by its token (the function answer_handout). :now is the caller's
-- clock, or NULL for the database's.
SELECT answer_handout(:subscriber, CAST(:signal_id AS bigint), CAST(:handout AS integer), CAST(:labels AS text[]),
                      CAST(:now AS timestamptz))


-- name: close_without_token
-- An answer without a token (a push-style subscriber) closes the subscriber's pending hand-out.
SELECT close_handout(:subscriber, CAST(:signal_id AS bigint), CAST(:now AS timestamptz))

-- name: hand_out_live
-- New live signals made ready for the live subscribers they match (the function hand_out_live).
SELECT hand_out_live(CAST(:rows AS json))

-- name: hand_out_events
-- Twin events handed out for the first time (the function hand_out_events).
SELECT h.* FROM hand_out_events(CAST(:rows AS json)) h
