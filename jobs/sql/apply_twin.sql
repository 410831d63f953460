-- Statements of the apply_twin job. Bind parameters: :run_id, :builtins, :twin_persisted.

-- name: pending
-- Twin commands without a response yet, with the state of their thing (read by Spark).
-- Of the headers only the conditional ones matter to the fold (B.10).
SELECT s.id AS signal_id, s.thing_id, s.action, s.path, s.value::text AS value,
       jsonb_strip_nulls(jsonb_build_object('if-match', s.headers->'if-match',
                                            'if-none-match', s.headers->'if-none-match'))::text AS headers, COALESCE(t.revision, 0) AS base_revision,
       t.document::text AS base_document
FROM signals s
LEFT JOIN things t ON t.thing_id = s.thing_id
WHERE s.kind = 'twin-command'
  AND NOT EXISTS (SELECT 1 FROM command_responses r WHERE r.signal_id = s.id)

-- name: pending_bounds
SELECT min(s.id), max(s.id) FROM signals s
WHERE s.kind = 'twin-command'
  AND NOT EXISTS (SELECT 1 FROM command_responses r WHERE r.signal_id = s.id)

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

-- name: insert_twin_persisted
-- The last write before COMMIT (only the instant TRUNCATE follows): clock_timestamp() is the fact's time (A.2.1). A request
-- decided meanwhile (its deadline passed first) gets the ack flagged late.
INSERT INTO acks (signal_id, label, status, payload, headers, issuer, received_at, disposition)
SELECT o.signal_id, :twin_persisted, o.status, o.payload,
       jsonb_build_object('correlation-id', s.correlation_id), 'ackstore', clock_timestamp(),
       CASE WHEN EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = o.signal_id)
            THEN 'late' ELSE 'counted' END
FROM stage_twin_outcomes o
JOIN signals s ON s.id = o.signal_id
WHERE o.run_id = :run_id AND o.event_action IS NOT NULL AND :twin_persisted = ANY (s.requested_acks)

-- name: clear_staging
-- TRUNCATE is transactional and instant; the step lock means no other run uses the table.
TRUNCATE stage_twin_outcomes
