-- request_answers as migration 0008 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW request_answers AS
SELECT r.signal_id, r.attempt, r.status, r.body,
       COALESCE(r.headers, (s.headers - 'requested-acks')
                           || jsonb_build_object('correlation-id', s.correlation_id, 'response-required', false))
           AS headers,
       r.cause, r.ack_statuses, r.decided_at, r.batch_id
FROM request_results r
LEFT JOIN signals s ON s.id = r.signal_id AND r.headers IS NULL;
