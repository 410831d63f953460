-- request_answers as migration 0029 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW request_answers AS
SELECT r.signal_id, r.attempt, r.status,
       CASE WHEN f.signal_id IS NULL THEN r.body
            ELSE jsonb_build_object(
                     twin_persisted(),
                     ack_entry(f.persisted_status, f.persisted_payload,
                               CASE WHEN s.api = 'http' AND f.persisted_status = 201
                                    THEN created_location(s.thing_id, s.path) ELSE '{}'::jsonb END,
                               false, f.correlation_id),
                     search_persisted(),
                     ack_entry(f.indexed_status, f.indexed_payload, '{}', f.indexed_weak, f.correlation_id)) END
           AS body,
       COALESCE(r.headers, (s.headers - 'requested-acks')
                           || jsonb_build_object('correlation-id', s.correlation_id, 'response-required', false))
           AS headers,
       r.cause, r.ack_statuses, r.decided_at, r.batch_id
FROM request_results r
LEFT JOIN signals s  -- derived entries need it too (a created thing's location), whatever the headers
    ON s.id = r.signal_id AND (r.headers IS NULL OR holds_derived_entries(r.body, r.cause, r.ack_statuses))
LEFT JOIN LATERAL (  -- looked up by key, for derived entries only; OFFSET 0 keeps command_facts' five
                     -- tables out of a reader's join list, which past eight (join_collapse_limit)
                     -- would plan this view whole and join a reader's few keys to all of it
    SELECT c.signal_id, c.correlation_id, c.persisted_status, c.persisted_payload, c.indexed_status,
           c.indexed_payload, c.indexed_weak
    FROM command_facts c  -- both facts, or the stored nulls show: never an entry made up of a fact that is gone
    WHERE c.signal_id = r.signal_id AND holds_derived_entries(r.body, r.cause, r.ack_statuses)
      AND c.persisted_at IS NOT NULL AND c.indexed_at IS NOT NULL OFFSET 0
) AS f ON true;
