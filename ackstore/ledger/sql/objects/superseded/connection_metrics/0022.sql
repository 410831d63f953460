-- connection_metrics as migration 0022 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION connection_metrics(connection text)
RETURNS TABLE (measure text, last_minute bigint, last_hour bigint, last_day bigint)
LANGUAGE sql STABLE AS $$
WITH spans AS (SELECT now() - interval '1 minute' AS minute, now() - interval '1 hour' AS hour,
                      now() - interval '1 day' AS day),
events AS (
    SELECT 'stored'::text AS measure, s.received_at AS happened_at FROM signals s, spans
    WHERE s.received_at > spans.day AND s.source = connection_metrics.connection
    UNION ALL
    SELECT CASE COALESCE(st.carried_out_as, st.decision) WHEN 'ack' THEN 'acknowledged' WHEN 'reject' THEN 'rejected'
                WHEN 'redeliver' THEN 'redelivered' ELSE 'dead_lettered' END, st.carried_out_at
    FROM settlements st CROSS JOIN spans
    CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = st.signal_id LIMIT 1) s
    WHERE st.carried_out_at > spans.day AND s.source = connection_metrics.connection
    UNION ALL
    SELECT l.kind, l.happened_at FROM connection_log l, spans
    WHERE l.connection = connection_metrics.connection AND l.happened_at > spans.day
)
SELECT m.measure,
       count(e.happened_at) FILTER (WHERE e.happened_at > spans.minute),
       count(e.happened_at) FILTER (WHERE e.happened_at > spans.hour),
       count(e.happened_at)
FROM spans
CROSS JOIN (VALUES (1, 'consumed'), (2, 'stored'), (3, 'dropped'), (4, 'enforced'), (5, 'acknowledged'),
                   (6, 'rejected'), (7, 'redelivered'), (8, 'dead_lettered'), (9, 'unsendable'),
                   (10, 'outage')) AS m(n, measure)
LEFT JOIN events e ON e.measure = m.measure
                      OR (m.measure = 'consumed' AND e.measure IN ('stored', 'dropped', 'enforced'))
GROUP BY m.n, m.measure
ORDER BY m.n
$$;
