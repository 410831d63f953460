-- Statements of the apply_twin job. Bind parameters: :run_id, :batch_id, :event_base; :partition,
-- :partitions.

-- name: pending
-- The twin commands not applied yet (queue_apply holds only those) of one partition of the things
-- (:partition of :partitions, by a hash of the thing's id), with the state of their thing, each
-- thing's commands together in ingestion order: what one Spark task folds. Of the headers only
-- the conditional ones matter to the fold (B.10: the four rules/twin.py reads).
SELECT s.id AS signal_id, s.thing_id, s.action, s.path, s.value::text AS value,
       jsonb_strip_nulls(jsonb_build_object('if-match', s.headers->'if-match',
                                            'if-none-match', s.headers->'if-none-match',
                                            'if-equal', s.headers->'if-equal',
                                            'condition', s.headers->'condition'))::text AS headers,
       COALESCE(t.revision, 0) AS base_revision, t.document::text AS base_document
FROM queue_apply q
JOIN signals s ON s.id = q.signal_id
LEFT JOIN things t ON t.thing_id = s.thing_id
WHERE mod(hashtext(s.thing_id) & 2147483647, :partitions) = :partition
ORDER BY s.thing_id, s.id

-- name: pending_count
-- How many twin commands wait to be applied (NULL: none).
SELECT NULLIF(count(*), 0) FROM queue_apply q

-- name: staged
SELECT count(*) FROM stage_twin_outcomes o WHERE o.run_id = :run_id

-- name: event_base
-- The last position of the event log. The log has one writer (this merge, under the step lock),
-- so positions are handed out in commit order (decisions #26).
SELECT COALESCE(max(r.event_id), 0) FROM command_responses r

-- name: insert_responses
-- The persisted facts: each command's response and, for a change, its event (its position after
-- :event_base in ingestion order, the thing's revision, the action). twin-persisted and the
-- event log are read from these rows (sql/objects/: builtin_facts, events). Only this step answers a twin
-- command, and each once: its queue entry leaves in this transaction.
INSERT INTO command_responses (signal_id, status, payload, is_error, batch_id, event_id, revision, event_action)
SELECT o.signal_id, o.status, o.payload, o.is_error, :batch_id,
       CASE WHEN o.event_action IS NOT NULL
            THEN :event_base + count(o.event_action) OVER (ORDER BY o.signal_id ROWS UNBOUNDED PRECEDING) END,
       o.revision, o.event_action
FROM stage_twin_outcomes o
WHERE o.run_id = :run_id

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

-- name: internal_errors
-- The commands of the run the fold could not decide: each answered 500 internalerror (decisions #116).
SELECT o.signal_id FROM stage_twin_outcomes o
WHERE o.run_id = :run_id AND o.status = 500 AND o.payload->>'error' = 'internalerror'
ORDER BY o.signal_id

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

-- name: clear_staging
-- TRUNCATE is transactional and instant; the step lock means no other run uses the table.
TRUNCATE stage_twin_outcomes
