-- report_settlement_status as migration 0007 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW report_settlement_status AS
SELECT s.source, 'pending decision'::text AS status, NULL::text AS decision,
       count(*) AS requests, min(s.received_at) AS oldest
FROM (SELECT signal_id FROM queue_decide
      UNION SELECT signal_id FROM awaiting_validation()
      UNION SELECT signal_id FROM queue_settle) p
JOIN signals s ON s.id = p.signal_id
WHERE s.api = 'connectivity' AND s.source NOT IN ('api', 'cli')
GROUP BY s.source
UNION ALL
SELECT s.source, CASE WHEN st.carried_out_at IS NULL THEN 'decided' ELSE 'carried out' END,
       st.decision, count(*), min(st.decided_at)
FROM settlements st
JOIN signals s ON s.id = st.signal_id
GROUP BY s.source, 2, st.decision;
