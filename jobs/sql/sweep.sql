-- Statements of the sweep job. Bind parameter: :run_id.

-- name: undecided
-- Every undecided request with what is known of it (read by Spark). Only acks whose fact
-- happened by the deadline count (A.2.1); whether the deadline has passed is judged now.
SELECT s.id AS signal_id, s.correlation_id, s.api, s.requested_acks, s.response_required,
       s.timeout_ms, s.deadline_at <= statement_timestamp() AS deadline_passed,
       r.status AS response_status, r.payload::text AS response_payload,
       COALESCE(r.is_error, false) AS response_is_error,
       (SELECT jsonb_agg(jsonb_build_array(a.label, a.status, a.payload, a.payload IS NOT NULL,
                                           a.headers, a.weak) ORDER BY a.received_at, a.id)
          FROM acks a
         WHERE a.signal_id = s.id AND a.disposition = 'counted'
           AND a.received_at <= s.deadline_at)::text AS acks
FROM signals s
LEFT JOIN command_responses r ON r.signal_id = s.id
WHERE NOT EXISTS (SELECT 1 FROM request_results x WHERE x.signal_id = s.id)

-- name: undecided_bounds
SELECT min(s.id), max(s.id) FROM signals s
WHERE NOT EXISTS (SELECT 1 FROM request_results x WHERE x.signal_id = s.id)

-- name: lock_acks
-- No ack is stored while decisions are merged: one that arrives now waits, then finds its
-- request decided and is stored late (A.2.5).
LOCK TABLE acks IN SHARE MODE

-- name: defer_outdated
-- A request decided by its deadline on a read that missed an in-time ack (one whose
-- transaction began before the deadline and committed after the read) is left undecided;
-- the next sweep decides it with that ack.
DELETE FROM stage_results x
WHERE x.run_id = :run_id AND x.cause = 'deadline'
  AND x.acks_seen <> (SELECT count(*) FROM acks a JOIN signals s ON s.id = a.signal_id
                      WHERE a.signal_id = x.signal_id AND a.disposition = 'counted'
                        AND a.received_at <= s.deadline_at)

-- name: staged
SELECT count(*) FROM stage_results WHERE run_id = :run_id

-- name: insert_results
INSERT INTO request_results (signal_id, status, body, headers, cause)
SELECT x.signal_id, x.status, x.body, x.headers, x.cause
FROM stage_results x
WHERE x.run_id = :run_id
ON CONFLICT (signal_id) DO NOTHING

-- name: flag_late
-- Counted acks whose fact came after the deadline did not count: kept, flagged late (A.2.5).
-- Only a request decided by its deadline or by an error can have such acks: one decided by
-- its acks had them all in time, and one without labels has no counted acks.
UPDATE acks a SET disposition = 'late'
FROM stage_results x
JOIN signals s ON s.id = x.signal_id
WHERE x.run_id = :run_id AND x.cause IN ('deadline', 'error') AND a.signal_id = x.signal_id
  AND a.disposition = 'counted' AND a.received_at > s.deadline_at

-- name: clear_staging
TRUNCATE stage_results
