-- Statements of the sweep job. Bind parameter: :run_id.
-- A request is one attempt of a signal (A.2.10), with its labels and deadline: request_attempts.

-- name: undecided
-- Every request waiting for a decision (queue_decide holds only those) with what is known of
-- it (read by Spark). Only acks of that attempt whose fact happened by its deadline count
-- (A.2.1); whether the deadline has passed is judged now.
SELECT s.id AS signal_id, q.attempt, s.correlation_id, s.api, s.thing_id, s.path, s.headers::text AS headers,
       a.requested_acks, s.response_required, s.timeout_ms, a.deadline_at <= statement_timestamp() AS deadline_passed,
       r.status AS response_status, r.payload::text AS response_payload,
       COALESCE(r.is_error, false) AS response_is_error,
       (SELECT jsonb_agg(jsonb_build_array(k.label, k.status, k.payload, k.payload IS NOT NULL,
                                           k.headers, k.weak) ORDER BY k.received_at, k.id)
          FROM request_acks k
         WHERE k.signal_id = s.id AND k.attempt = q.attempt AND k.disposition = 'counted'
           AND k.received_at <= a.deadline_at)::text AS acks,
       (SELECT k.reason FROM acks k  -- the last live response refused as not answering the command
         WHERE k.signal_id = s.id AND k.attempt = q.attempt AND k.disposition = 'invalid'
         ORDER BY k.id DESC LIMIT 1) AS invalid_response
FROM queue_decide q
JOIN signals s ON s.id = q.signal_id
JOIN request_attempts a ON a.signal_id = q.signal_id AND a.attempt = q.attempt
LEFT JOIN command_responses r ON r.signal_id = s.id

-- name: undecided_bounds
-- Whether anything waits for a decision, and the id range the partitioned read spans.
SELECT min(q.signal_id), max(q.signal_id) FROM queue_decide q

-- name: lock_acks
-- No ack is stored and no fact lands while decisions are merged: an ack that arrives now waits,
-- then finds its request decided and is stored late (A.2.5); a batch of facts waits before its
-- time is taken (jobs/sql/batches.sql), so its facts come after the decisions.
LOCK TABLE acks IN SHARE MODE;
SELECT pg_advisory_xact_lock(hashtext('ackstore.facts'))

-- name: defer_outdated
-- A request decided by its deadline on a read that missed an in-time ack (one whose
-- transaction began before the deadline and committed after the read) is left undecided;
-- the next sweep decides it with that ack.
DELETE FROM stage_results x
WHERE x.run_id = :run_id AND x.cause = 'deadline'
  AND x.acks_seen <> (SELECT count(*) FROM request_acks k
                      JOIN request_attempts a ON a.signal_id = k.signal_id AND a.attempt = k.attempt
                      WHERE k.signal_id = x.signal_id AND k.attempt = x.attempt AND k.disposition = 'counted'
                        AND k.received_at <= a.deadline_at)

-- name: staged
-- How many decisions this run staged.
SELECT count(*) FROM stage_results WHERE run_id = :run_id

-- name: insert_results
-- What each requester is told, once per attempt.
INSERT INTO request_results (signal_id, attempt, status, body, headers, cause, ack_statuses)
SELECT x.signal_id, x.attempt, x.status, x.body, x.headers, x.cause, x.ack_statuses
FROM stage_results x
WHERE x.run_id = :run_id
ON CONFLICT (signal_id, attempt) DO NOTHING

-- name: flag_late
-- Counted acks whose fact came after the deadline did not count: kept, flagged late (A.2.5).
-- Only a request decided by its deadline or by an error can have such acks: one decided by
-- its acks had them all in time, and one without labels has no counted acks.
UPDATE acks k SET disposition = 'late'
FROM stage_results x
JOIN request_attempts a ON a.signal_id = x.signal_id AND a.attempt = x.attempt
WHERE x.run_id = :run_id AND x.cause IN ('deadline', 'error') AND k.signal_id = x.signal_id
  AND k.attempt = x.attempt AND k.disposition = 'counted'
  AND k.received_at > a.deadline_at

-- name: dequeue
-- Decided requests leave the decision queue ...
DELETE FROM queue_decide q
USING stage_results x
WHERE x.run_id = :run_id AND q.signal_id = x.signal_id AND q.attempt = x.attempt

-- name: enqueue_validation
-- ... and wait for the validation gate, which alone lets them be settled (A.2.6).
INSERT INTO queue_validate (signal_id, attempt)
SELECT x.signal_id, x.attempt FROM stage_results x WHERE x.run_id = :run_id
ON CONFLICT DO NOTHING

-- name: clear_staging
-- TRUNCATE is transactional and instant; the step lock means no other run uses the table.
TRUNCATE stage_results
