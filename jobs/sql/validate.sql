-- Statements of the validate job. Bind parameters: :run_id, :twin_persisted, :weak_header,
-- :transport_api, :local_sources, :watermark, :after.
-- The slice: the requests decided since the last passed validation (queue_validate holds only
-- those), their counted acks, and the settlements written since the last passed validation.
-- Each statement fills one stage_check_* table that Great Expectations then reads whole.

-- name: watermark
-- The last settlement id a passed validation checked. Read first and bound as "after", so the
-- planner sees the value and walks the id index (a sub-select here made it scan all signals).
SELECT COALESCE(max(w.position), 0) FROM pipeline_watermarks w WHERE w.name = :watermark

-- name: slice_size
-- How much there is to validate: queued decisions, and settlements past the watermark.
SELECT (SELECT count(*) FROM queue_validate) AS decisions,
       (SELECT count(*) FROM settlements st WHERE st.id > :after) AS settlements

-- name: slice_results
-- One row per decided request of the slice, with what its invariants are stated over.
INSERT INTO stage_check_results (run_id, signal_id, attempt, cause, status, decided_at, deadline_at,
                                 requested, counted_in_time, response_is_error, aggregated,
                                 body_entries, body_keys, combined_status)
SELECT :run_id, q.signal_id, q.attempt, r.cause, r.status, r.decided_at, req.deadline_at,
       cardinality(req.labels),
       (SELECT count(DISTINCT k.label) FROM request_acks k
         WHERE k.signal_id = q.signal_id AND k.attempt = q.attempt AND k.disposition = 'counted'
           AND k.received_at <= req.deadline_at AND k.label = ANY (req.labels)),
       COALESCE(cr.is_error, false),
       agg.keyed,
       CASE WHEN agg.keyed THEN body.entries END,
       CASE WHEN agg.keyed THEN body.keys END,
       CASE WHEN agg.keyed THEN CASE WHEN body.all_2xx THEN 200 ELSE 424 END END
FROM queue_validate q
JOIN signals s ON s.id = q.signal_id
JOIN request_results r ON r.signal_id = q.signal_id AND r.attempt = q.attempt
JOIN request_attempts a ON a.signal_id = q.signal_id AND a.attempt = q.attempt
LEFT JOIN command_responses cr ON cr.signal_id = q.signal_id
CROSS JOIN LATERAL (SELECT a.requested_acks AS labels, a.deadline_at) req
-- An aggregated decision over two or more labels answers with a body keyed by label (B.4.3);
-- with response-required=false a success has no body at all.
CROSS JOIN LATERAL (SELECT r.cause IN ('acks', 'deadline') AND cardinality(req.labels) >= 2
                           AND r.body IS NOT NULL AS keyed) agg
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE e.key = ANY (req.labels)) AS entries,
           count(*) AS keys,
           COALESCE(bool_and(jsonb_typeof(e.value -> 'status') = 'number'
                             AND (e.value ->> 'status')::numeric BETWEEN 200 AND 299), false) AS all_2xx
    FROM jsonb_each(CASE WHEN jsonb_typeof(r.body) = 'object' THEN r.body ELSE '{}'::jsonb END) e
) body

-- name: slice_acks
-- Every counted ack of the slice's requests, with the facts its invariants need.
INSERT INTO stage_check_acks (run_id, ack_id, signal_id, attempt, label, status, weak, weak_header,
                              custom_weak, declared, requested, response_success, event_exists)
SELECT :run_id, k.id, k.signal_id, k.attempt, k.label, k.status, k.weak,
       COALESCE(k.headers ->> :weak_header = 'true', false),
       k.weak AND NOT k.label = ANY (:builtin_labels),
       EXISTS (SELECT 1 FROM declared_labels d WHERE d.label = k.label),
       k.label = ANY (a.requested_acks),
       CASE WHEN k.label = :twin_persisted
            THEN COALESCE(NOT cr.is_error AND cr.status BETWEEN 200 AND 299, false) END,
       CASE WHEN k.label = :twin_persisted
            THEN cr.event_id IS NOT NULL END  -- the event log is the responses' events
FROM queue_validate q
-- Per request (OFFSET 0 keeps the subquery whole, so its conditions reach into the view's derived half).
CROSS JOIN LATERAL (SELECT * FROM request_acks x
                    WHERE x.signal_id = q.signal_id AND x.attempt = q.attempt AND x.disposition = 'counted'
                    OFFSET 0) k
JOIN request_attempts a ON a.signal_id = q.signal_id AND a.attempt = q.attempt
LEFT JOIN command_responses cr ON cr.signal_id = q.signal_id

-- name: slice_settlements
-- Settlement decisions written since the last passed validation.
INSERT INTO stage_check_settlements (run_id, settlement_id, signal_id, attempt, source, api, decided)
SELECT :run_id, st.id, st.signal_id, st.attempt, s.source, s.api,
       EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = st.signal_id AND r.attempt = st.attempt)
FROM settlements st
JOIN signals s ON s.id = st.signal_id
WHERE st.id > :after

-- name: enqueue_settlements
-- Passed: the slice's requests from connections wait for their transport decision. Which
-- signals those are is settlement.needs_transport_settlement's rule; its values are bound here.
INSERT INTO queue_settle (signal_id, attempt)
SELECT c.signal_id, c.attempt
FROM stage_check_results c
JOIN signals s ON s.id = c.signal_id
WHERE c.run_id = :run_id AND s.api = :transport_api AND s.source <> ALL (CAST(:local_sources AS text[]))
ON CONFLICT DO NOTHING

-- name: dequeue
-- Passed: the slice's requests leave the validation queue.
DELETE FROM queue_validate q
USING stage_check_results c
WHERE c.run_id = :run_id AND q.signal_id = c.signal_id AND q.attempt = c.attempt

-- name: advance_watermark
-- Passed: the settlements checked are not checked again.
INSERT INTO pipeline_watermarks (name, position)
SELECT :watermark, max(c.settlement_id) FROM stage_check_settlements c
WHERE c.run_id = :run_id
HAVING max(c.settlement_id) IS NOT NULL
ON CONFLICT (name) DO UPDATE SET position = GREATEST(pipeline_watermarks.position, EXCLUDED.position)

-- name: clear_staging
-- Passed: the slice tables are emptied (a failed slice stays in them, for inspection).
TRUNCATE stage_check_results, stage_check_acks, stage_check_settlements
