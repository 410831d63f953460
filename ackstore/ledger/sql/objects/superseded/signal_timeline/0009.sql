-- signal_timeline as migration 0009 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW signal_timeline AS
SELECT t.signal_id, t.attempt, t.at, t.stage, t.checkpoint, t.label, t.status, t.detail
FROM (
    SELECT s.id AS signal_id, 1 AS attempt, s.received_at AS at, 1 AS stage, 'received'::text AS checkpoint,
           NULL::text AS label, NULL::integer AS status,
           'from ' || s.source || ', message ' || s.source_message_id AS detail
    FROM signals s
    UNION ALL
    SELECT a.signal_id, a.attempt, a.opened_at, 2, 'attempt opened', NULL, NULL,
           'requested ' || COALESCE(NULLIF(array_to_string(a.requested_acks, ', '), ''), 'nothing')
           || '; deadline ' || to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
    FROM attempts a
    UNION ALL
    SELECT r.signal_id, NULL, b.committed_at, 3, 'applied', NULL, r.status,
           CASE WHEN r.event_action IS NOT NULL THEN r.event_action || ', revision ' || r.revision
                WHEN r.is_error THEN 'failed' ELSE 'nothing changed' END
    FROM command_responses r
    JOIN ledger_batches b ON b.id = r.batch_id
    UNION ALL
    SELECT f.signal_id, NULL, f.indexed_at, 4, 'indexed', NULL, f.indexed_status,
           CASE WHEN f.indexed_weak THEN 'the index already held this state' END
    FROM command_facts f
    WHERE f.indexed_at IS NOT NULL
    UNION ALL
    SELECT k.signal_id, k.attempt, k.received_at, 5, 'ack', k.label, k.status,
           k.disposition || CASE WHEN k.weak THEN ', weak' ELSE '' END || ', from ' || k.issuer
    FROM request_acks k
    UNION ALL
    SELECT r.signal_id, r.attempt, r.decided_at, 6, 'decided', NULL, r.status, 'by ' || r.cause
    FROM request_results r
    UNION ALL
    SELECT r.signal_id, r.attempt, p.passed_at, 7, 'validated', NULL, NULL,
           CASE WHEN p.run_id IS NULL THEN 'at the latest: passes before migration 0009 were not timed' END
    FROM request_results r
    CROSS JOIN LATERAL (SELECT v.passed_at, v.run_id FROM validation_passes v WHERE v.results_upto >= r.batch_id
                        ORDER BY v.results_upto LIMIT 1) p
    UNION ALL
    SELECT st.signal_id, st.attempt, st.decided_at, 8, 'settlement decided', NULL, NULL, st.decision
    FROM settlements st
    UNION ALL
    SELECT st.signal_id, st.attempt, st.carried_out_at, 9, 'carried out', NULL, NULL, st.decision
    FROM settlements st
    WHERE st.carried_out_at IS NOT NULL
) t;
