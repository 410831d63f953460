-- Statements of the apply_twin job. Bind parameters: :run_id, :builtins, :twin_persisted, :issuer.

-- name: pending
-- Twin commands not applied yet (queue_apply holds only those), with the state of their thing
-- (read by Spark). Of the headers only the conditional ones matter to the fold (B.10).
SELECT s.id AS signal_id, s.thing_id, s.action, s.path, s.value::text AS value,
       jsonb_strip_nulls(jsonb_build_object('if-match', s.headers->'if-match',
                                            'if-none-match', s.headers->'if-none-match'))::text AS headers, COALESCE(t.revision, 0) AS base_revision,
       t.document::text AS base_document
FROM queue_apply q
JOIN signals s ON s.id = q.signal_id
LEFT JOIN things t ON t.thing_id = s.thing_id

-- name: pending_bounds
-- Whether there is anything to apply, and the id range the partitioned read spans.
SELECT min(q.signal_id), max(q.signal_id) FROM queue_apply q

-- name: staged
SELECT count(*) FROM stage_twin_outcomes o WHERE o.run_id = :run_id

-- name: insert_responses
-- Conflicts mean the command was answered meanwhile: the caller compares counts and rolls back.
INSERT INTO command_responses (signal_id, status, payload, is_error)
SELECT o.signal_id, o.status, o.payload, o.is_error
FROM stage_twin_outcomes o
WHERE o.run_id = :run_id
ON CONFLICT (signal_id) DO NOTHING

-- name: update_things
-- Only from the revision the fold started at (a compare-and-set per thing).
UPDATE things t
SET revision = o.final_revision, document = o.final_document,
    deleted = o.final_document IS NULL, updated_at = now()
FROM stage_twin_outcomes o
WHERE o.run_id = :run_id AND o.is_last AND o.final_revision > o.base_revision
  AND o.base_revision > 0 AND t.thing_id = o.thing_id AND t.revision = o.base_revision

-- name: insert_things
INSERT INTO things (thing_id, revision, document, deleted)
SELECT o.thing_id, o.final_revision, o.final_document, o.final_document IS NULL
FROM stage_twin_outcomes o
WHERE o.run_id = :run_id AND o.is_last AND o.final_revision > o.base_revision AND o.base_revision = 0
ON CONFLICT (thing_id) DO NOTHING

-- name: changed_things
SELECT count(*) FROM stage_twin_outcomes o
WHERE o.run_id = :run_id AND o.is_last AND o.final_revision > o.base_revision

-- name: insert_events
-- The event carries the command's headers with only its custom requested-acks (B.1).
INSERT INTO thing_events (thing_id, revision, signal_id, action, path, value, headers)
SELECT o.thing_id, o.revision, o.signal_id, o.event_action, s.path,
       CASE WHEN o.event_action = 'deleted' THEN NULL ELSE s.value END,
       s.headers || jsonb_build_object('requested-acks', to_jsonb(ARRAY(
           SELECT u.label FROM unnest(s.requested_acks) WITH ORDINALITY AS u(label, n)
           WHERE u.label <> ALL (CAST(:builtins AS text[])) ORDER BY u.n)))
FROM stage_twin_outcomes o
JOIN signals s ON s.id = o.signal_id
WHERE o.run_id = :run_id AND o.event_action IS NOT NULL

-- name: dequeue
-- The applied commands leave the queue.
DELETE FROM queue_apply q
USING stage_twin_outcomes o
WHERE o.run_id = :run_id AND q.signal_id = o.signal_id

-- name: enqueue_index
-- Changed things wait for index_search, up to their newest revision.
INSERT INTO queue_index (thing_id, revision)
SELECT o.thing_id, o.final_revision
FROM stage_twin_outcomes o
WHERE o.run_id = :run_id AND o.is_last AND o.final_revision > o.base_revision
ON CONFLICT (thing_id) DO UPDATE SET revision = GREATEST(queue_index.revision, EXCLUDED.revision)

-- name: insert_twin_persisted
-- The last write before COMMIT (only the instant TRUNCATE follows): clock_timestamp() is the
-- fact's time (A.2.1). The ack belongs to the request's current attempt (A.2.10), if that
-- attempt requested it; an attempt decided meanwhile (its deadline passed first) gets it late.
INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, received_at, disposition)
SELECT o.signal_id, COALESCE(a.attempt, 1), :twin_persisted, o.status, o.payload,
       jsonb_build_object('correlation-id', s.correlation_id), :issuer, clock_timestamp(),
       CASE WHEN EXISTS (SELECT 1 FROM request_results r
                         WHERE r.signal_id = o.signal_id AND r.attempt = COALESCE(a.attempt, 1))
            THEN 'late' ELSE 'counted' END
FROM stage_twin_outcomes o
JOIN signals s ON s.id = o.signal_id
LEFT JOIN LATERAL (SELECT x.attempt, x.requested_acks FROM attempts x
                   WHERE x.signal_id = o.signal_id ORDER BY x.attempt DESC LIMIT 1) a ON true
WHERE o.run_id = :run_id AND o.event_action IS NOT NULL
  AND :twin_persisted = ANY (COALESCE(a.requested_acks, s.requested_acks))

-- name: clear_staging
-- TRUNCATE is transactional and instant; the step lock means no other run uses the table.
TRUNCATE stage_twin_outcomes
