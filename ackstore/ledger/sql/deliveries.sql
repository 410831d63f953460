-- Statements of subscriber delivery: pull with leases (A.3). Bind parameters are named below.

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
-- Pending hand-outs whose request attempt is decided have nothing left to answer (closed by
-- `close`): they are never handed out again. Rows another consumer is handing out are skipped.
SELECT p.signal_id FROM deliveries p
WHERE p.subscriber_id = :subscriber AND p.done_at IS NULL AND p.available_at <= :now
  AND EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = p.signal_id AND r.attempt = p.attempt)
FOR UPDATE SKIP LOCKED

-- name: ready
-- The subscriber's ready signals (live signals not handed out yet, leases that ran out), oldest
-- first, locked for `lease`. SKIP LOCKED: competing consumers never get the same row.
SELECT p.signal_id FROM deliveries p
WHERE p.subscriber_id = :subscriber AND p.done_at IS NULL AND p.available_at <= :now
ORDER BY p.signal_id
LIMIT :limit
FOR UPDATE SKIP LOCKED

-- name: lease
-- One more hand-out (the token of every earlier one is superseded) under a new lease.
UPDATE deliveries d
SET handouts = d.handouts + 1, leased_at = :now, available_at = :now + :lease_ms * interval '1 millisecond'
WHERE d.subscriber_id = :subscriber AND d.signal_id = ANY (:signal_ids)
RETURNING d.signal_id, d.attempt, d.handouts, d.token_key

-- name: lock_position
-- One consumer at a time reads the event log for a subscriber; the others wait here.
SELECT event_position FROM subscribers WHERE id = :subscriber FOR UPDATE

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
UPDATE subscribers SET event_position = :position WHERE id = :subscriber AND event_position < :position

-- name: requested_now
-- The labels the current attempt of each handed-out signal requests, and whether it is live.
SELECT s.id AS signal_id, s.channel = 'live' AS live, a.requested_acks
FROM signals s
JOIN current_attempts a ON a.signal_id = s.id
WHERE s.id = ANY (:signal_ids)

-- name: close
-- Hand-outs that await no answer (decided, or the signal requests none of the group's labels).
UPDATE deliveries SET done_at = :now
WHERE subscriber_id = :subscriber AND signal_id = ANY (:signal_ids) AND done_at IS NULL

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

-- name: lock_delivery
-- The hand-out an ack or live response answers, locked against a concurrent pull.
SELECT token_key, handouts, answered_handout, answered_labels, done_at
FROM deliveries
WHERE subscriber_id = :subscriber AND signal_id = :signal_id
FOR UPDATE

-- name: answer
-- The hand-out is answered by its token (acks of the same token again add only new labels).
-- :now is the caller's clock, or NULL for the database's.
UPDATE deliveries
SET done_at = COALESCE(done_at, CAST(:now AS timestamptz), statement_timestamp()), answered_handout = :handout,
    answered_labels = CASE WHEN answered_handout IS DISTINCT FROM :handout THEN CAST(:labels AS text[])
                           ELSE ARRAY(SELECT DISTINCT l FROM unnest(answered_labels || CAST(:labels AS text[])) l) END
WHERE subscriber_id = :subscriber AND signal_id = :signal_id

-- name: close_without_token
-- An answer without a token (a push-style subscriber) closes the subscriber's pending hand-out.
-- :now is the caller's clock, or NULL for the database's.
UPDATE deliveries SET done_at = COALESCE(CAST(:now AS timestamptz), statement_timestamp())
WHERE subscriber_id = :subscriber AND signal_id = :signal_id AND done_at IS NULL

-- name: reopen
-- A new attempt of a signal (A.2.10): its subscribers see it again; the hand-out count is kept,
-- so the next hand-out's token supersedes every earlier one.
UPDATE deliveries
SET attempt = :attempt, done_at = NULL, answered_handout = NULL, answered_labels = '{}',
    available_at = '-infinity'  -- ready at once, whatever the clock
WHERE signal_id = :signal_id
