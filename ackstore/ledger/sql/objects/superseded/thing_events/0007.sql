-- thing_events as migration 0007 defined it (superseded: the current definition is in objects/).
-- The event log subscribers read (A.3, B.1): a persisted change of a twin command, in the
-- command's words. Its headers are the command's with only its custom requested-acks; the
-- built-in labels are spelled out (a view takes no parameters: ackstore.rules.labels).
-- version: 0007
CREATE OR REPLACE VIEW thing_events AS
SELECT r.event_id AS id, s.thing_id, r.revision, r.signal_id, r.event_action AS action, s.path,
       CASE WHEN r.event_action = 'deleted' THEN NULL ELSE s.value END AS value,
       s.headers || jsonb_build_object('requested-acks', to_jsonb(ARRAY(
           SELECT u.label FROM unnest(s.requested_acks) WITH ORDINALITY AS u(label, n)
           WHERE u.label <> ALL (ARRAY['twin-persisted', 'search-persisted', 'live-response']) ORDER BY u.n))) AS headers,
       b.committed_at AS created_at
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN ledger_batches b ON b.id = r.batch_id
WHERE r.event_id IS NOT NULL;
