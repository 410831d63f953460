-- The QoS-1 audit report: the open work, oldest first, and where each signal is stuck.

-- name: report_audit
-- The QoS-1 audit: every signal received but not yet answered (API, CLI) or not yet settled
-- (connections), oldest first, with its age and the checkpoint it is stuck before. A waiting
-- request's labels and deadline: its signal's for attempt 1, a redelivery's row's (attempt_value,
-- joined by the queue's keys as the sweep joins them: decisions #148).
-- version: 0036
CREATE OR REPLACE VIEW report_audit AS
SELECT signal_id, correlation_id, source, source_message_id, attempt, stuck_at, detail,
       received_at, now() - received_at AS age
FROM (
    SELECT DISTINCT ON (w.signal_id) w.signal_id, s.correlation_id, s.source, s.source_message_id,
           w.attempt, w.stuck_at, w.detail, s.received_at
    FROM (
        SELECT q.signal_id, 1 AS attempt, 1 AS stage, 'apply: the twin change is not persisted yet'::text AS stuck_at,
               NULL::text AS detail
        FROM queue_apply q
        UNION ALL
        SELECT q.signal_id, q.attempt, 2, 'decide: waiting for acks or the deadline',
               'missing: ' || COALESCE((
                   SELECT string_agg(l.label, ', ' ORDER BY l.n)
                   FROM unnest(a.requested_acks) WITH ORDINALITY AS l(label, n)
                   WHERE NOT EXISTS (SELECT 1 FROM request_acks k
                                     WHERE k.signal_id = q.signal_id AND k.attempt = q.attempt
                                       AND k.label = l.label AND k.disposition = counted())), 'nothing')
               || '; deadline ' || to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
        FROM queue_decide q
        JOIN signals qs ON qs.id = q.signal_id
        LEFT JOIN attempts re ON re.signal_id = q.signal_id AND redelivery_attempt(re.attempt)
                             AND re.attempt = q.attempt
        CROSS JOIN LATERAL (SELECT attempt_value(q.attempt, qs.requested_acks, re.requested_acks) AS requested_acks,
                                   attempt_value(q.attempt, qs.deadline_at, re.deadline_at) AS deadline_at) a
        WHERE attempt_found(q.attempt, re.signal_id IS NOT NULL)
        UNION ALL
        SELECT q.signal_id, q.attempt, 3, 'validate: decided, waiting for the validation gate', NULL
        FROM awaiting_validation() q
        JOIN signals s ON s.id = q.signal_id
        WHERE needs_transport_settlement(s.api, s.source)
        UNION ALL
        SELECT q.signal_id, q.attempt, 4, 'settle: validated, waiting for a settlement decision', NULL
        FROM queue_settle q
        UNION ALL
        SELECT st.signal_id, st.attempt, 5, 'connector: decided, not carried out yet', st.decision
        FROM settlements st
        WHERE st.carried_out_at IS NULL
    ) w
    JOIN signals s ON s.id = w.signal_id
    ORDER BY w.signal_id, w.stage
) stuck
ORDER BY received_at, signal_id;
