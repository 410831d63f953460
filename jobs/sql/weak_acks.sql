-- Statements of the weak_acks job. Bind parameters: :run_id, :issuer.

-- name: candidate_bounds
-- Whether any undecided request asks for a label some subscriber declared, and the id range.
-- With no label declared at all, nothing is read (the first EXISTS is checked once, first).
SELECT min(q.signal_id), max(q.signal_id)
FROM queue_decide q
JOIN signals s ON s.id = q.signal_id
LEFT JOIN attempts re ON re.signal_id = q.signal_id AND redelivery_attempt(re.attempt) AND re.attempt = q.attempt
CROSS JOIN LATERAL (SELECT attempt_value(q.attempt, s.requested_acks, re.requested_acks) AS requested_acks) a
WHERE EXISTS (SELECT 1 FROM declared_labels) AND attempt_found(q.attempt, re.signal_id IS NOT NULL)
  AND EXISTS (SELECT 1 FROM unnest(a.requested_acks) AS l(label) JOIN declared_labels d ON d.label = l.label)

-- name: candidates
-- Every (undecided request, declared label it asks for, not counted yet) whose signal can be
-- judged now: a live signal, or a twin command whose event exists (a failed command has none
-- and is decided by its error). With the declaring group's subscribers (read by Spark).
SELECT q.signal_id, q.attempt, s.correlation_id, s.kind, s.thing_id, s.action, s.path,
       s.value::text AS value, e.action AS event_action, e.path AS event_path, e.value::text AS event_value,
       l.label,
       (SELECT jsonb_agg(jsonb_build_object('id', u.id, 'channels', u.channels, 'namespaces', u.namespaces,
                                            'filter', u.filter) ORDER BY u.id)
          FROM subscribers u WHERE u.holder = d.holder)::text AS group_members
FROM queue_decide q
JOIN signals s ON s.id = q.signal_id
LEFT JOIN attempts re ON re.signal_id = q.signal_id AND redelivery_attempt(re.attempt) AND re.attempt = q.attempt
LEFT JOIN thing_events e ON e.signal_id = q.signal_id
CROSS JOIN LATERAL unnest(attempt_value(q.attempt, s.requested_acks, re.requested_acks)) AS l(label)
JOIN declared_labels d ON d.label = l.label
WHERE attempt_found(q.attempt, re.signal_id IS NOT NULL) AND (s.channel = 'live' OR e.id IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM acks k WHERE k.signal_id = q.signal_id AND k.attempt = q.attempt
                                          AND k.label = l.label AND k.disposition = counted())

-- name: staged
-- How many weak acks this run staged.
SELECT count(*) FROM stage_weak_acks WHERE run_id = :run_id

-- name: insert_weak_acks
-- The weak acks (B.8), counted for requests still undecided; a label counted meanwhile (its
-- subscriber acked after all) keeps that ack. The fact time is now, at the end of the merge.
INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, disposition)
SELECT x.signal_id, x.attempt, x.label, 200, to_jsonb(x.reason), x.headers, :issuer, true, clock_timestamp(),
       counted()
FROM stage_weak_acks x
WHERE x.run_id = :run_id
  AND NOT EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = x.signal_id AND r.attempt = x.attempt)
ON CONFLICT (signal_id, attempt, label) WHERE disposition = counted() DO NOTHING

-- name: clear_staging
-- TRUNCATE is transactional and instant; the step lock means no other run uses the table.
TRUNCATE stage_weak_acks
