-- The settlement report (docs/reports.md): per source, pending, decided and carried out.

-- name: report_settlement_status
-- Per source: requests waiting for a settlement decision, decisions not carried out yet,
-- decisions carried out — by decision.
-- version: 0010
CREATE OR REPLACE VIEW report_settlement_status AS
SELECT s.source, 'pending decision'::text AS status, NULL::text AS decision,
       count(*) AS requests, min(s.received_at) AS oldest
FROM (SELECT signal_id FROM queue_decide
      UNION SELECT signal_id FROM awaiting_validation()
      UNION SELECT signal_id FROM queue_settle) p
JOIN signals s ON s.id = p.signal_id
WHERE needs_transport_settlement(s.api, s.source)
GROUP BY s.source
UNION ALL
SELECT s.source, CASE WHEN st.carried_out_at IS NULL THEN 'decided' ELSE 'carried out' END,
       st.decision, count(*), min(st.decided_at)
FROM settlements st
JOIN signals s ON s.id = st.signal_id
GROUP BY s.source, 2, st.decision;
