-- The event log subscribers read: a view over the persisted responses and their commands.

-- name: thing_events
-- The event log subscribers read (A.3, B.1): a persisted change of a twin command, in the
-- command's words. Its headers are the command's with only its custom requested-acks; the
-- built-in labels are builtin_labels().
-- version: 0011
CREATE OR REPLACE VIEW thing_events AS
SELECT r.event_id AS id, s.thing_id, r.revision, r.signal_id, r.event_action AS action, s.path,
       CASE WHEN r.event_action = 'deleted' THEN NULL ELSE s.value END AS value,
       s.headers || jsonb_build_object('requested-acks', to_jsonb(ARRAY(
           SELECT u.label FROM unnest(s.requested_acks) WITH ORDINALITY AS u(label, n)
           WHERE u.label <> ALL (builtin_labels()) ORDER BY u.n))) AS headers,
       b.committed_at AS created_at
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN ledger_batches b ON b.id = r.batch_id
WHERE r.event_id IS NOT NULL;
