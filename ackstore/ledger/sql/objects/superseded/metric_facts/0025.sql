-- metric_facts as migration 0025 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION metric_facts(after_seq bigint, upto_seq bigint)
RETURNS TABLE (metric text, source text, label text, detail text, value float8)
LANGUAGE sql STABLE AS $$
WITH received AS (
    SELECT s.source, s.channel, count(*) AS n FROM signals s
    WHERE s.seq > after_seq AND (upto_seq IS NULL OR s.seq <= upto_seq)
    GROUP BY s.source, s.channel
), decided AS (
    SELECT s.source, r.status, r.cause, r.signal_id, r.attempt, r.seq,
           awaits_builtin_facts(r.ack_statuses, r.status) AS awaits,
           extract(epoch FROM r.decided_at - s.received_at)::float8 AS seconds
    FROM request_results r CROSS JOIN LATERAL (SELECT x.source, x.received_at FROM signals x
                                               WHERE x.id = r.signal_id LIMIT 1) s
    WHERE r.seq > after_seq AND (upto_seq IS NULL OR r.seq <= upto_seq)
), carried AS (
    SELECT s.source, st.decision, COALESCE(st.carried_out_as, st.decision) AS carried_out_as,
           extract(epoch FROM st.carried_out_at - r.decided_at)::float8 AS seconds
    FROM settlements st
    CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = st.signal_id LIMIT 1) s
    CROSS JOIN LATERAL (SELECT x.decided_at FROM request_results x
                        WHERE x.signal_id = st.signal_id AND x.attempt = st.attempt LIMIT 1) r
    WHERE st.seq > after_seq AND (upto_seq IS NULL OR st.seq <= upto_seq)
), acked AS (
    SELECT s.source, k.weak, k.disposition
    FROM acks k CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = k.signal_id LIMIT 1) s
    WHERE k.seq > after_seq AND (upto_seq IS NULL OR k.seq <= upto_seq)
), late_when_decided AS (
    SELECT d.source, count(*) AS n FROM decided d
    CROSS JOIN LATERAL (SELECT x.deadline_at FROM attempts x
                        WHERE x.signal_id = d.signal_id AND x.attempt = d.attempt LIMIT 1) a
    CROSS JOIN LATERAL (SELECT x.received_at FROM acks x WHERE x.signal_id = d.signal_id AND x.attempt = d.attempt
                          AND x.disposition = counted() OFFSET 0) k
    WHERE judged_by_deadline(d.cause) AND decided_disposition(counted(), k.received_at, a.deadline_at, d.cause) = 'late'
    GROUP BY d.source
), late_builtin AS (
    SELECT d.source, count(*) AS n FROM decided d
    CROSS JOIN LATERAL late_builtin_acks(d.signal_id) l
    WHERE judged_by_deadline(d.cause) AND l.attempt = d.attempt AND l.fact_seq < d.seq
    GROUP BY d.source
    UNION ALL
    SELECT s.source, count(*)
    FROM (SELECT w.signal_id FROM metric_awaited_facts w
          WHERE w.signal_id = ANY (ARRAY(SELECT r.signal_id FROM command_responses r
                                         WHERE r.seq > after_seq AND (upto_seq IS NULL OR r.seq <= upto_seq)
                                           AND r.event_id IS NOT NULL))
             OR w.thing_id = ANY (ARRAY(SELECT m.thing_id FROM search_marks m
                                        WHERE m.seq > after_seq AND (upto_seq IS NULL OR m.seq <= upto_seq)))
          UNION
          SELECT d.signal_id FROM decided d WHERE d.awaits) c
    CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = c.signal_id LIMIT 1) s
    CROSS JOIN LATERAL late_builtin_acks(c.signal_id) l
    WHERE l.fact_seq > after_seq AND (upto_seq IS NULL OR l.fact_seq <= upto_seq) AND l.decided_seq < l.fact_seq
    GROUP BY s.source
)
SELECT 'signals_stored', x.source, x.channel, '', x.n::float8 FROM received x
UNION ALL
SELECT 'requests_decided', d.source, status_class(d.status), '', count(*)::float8 FROM decided d GROUP BY 2, 3
UNION ALL
SELECT 'received_to_decided_bucket', d.source, latency_bucket(d.seconds), '', count(*)::float8 FROM decided d GROUP BY 2, 3
UNION ALL
SELECT 'received_to_decided_sum', d.source, '', '', sum(d.seconds) FROM decided d GROUP BY 2
UNION ALL
SELECT 'settlements_carried_out', c.source, c.decision, c.carried_out_as, count(*)::float8 FROM carried c GROUP BY 2, 3, 4
UNION ALL
SELECT 'settlement_decisions', c.source, c.decision, '', count(*)::float8 FROM carried c GROUP BY 2, 3
UNION ALL
SELECT 'dead_letters', c.source, '', '', count(*)::float8 FROM carried c WHERE c.carried_out_as = 'dead-letter' GROUP BY 2
UNION ALL
SELECT 'decided_to_carried_out_bucket', c.source, latency_bucket(c.seconds), '', count(*)::float8 FROM carried c GROUP BY 2, 3
UNION ALL
SELECT 'decided_to_carried_out_sum', c.source, '', '', sum(c.seconds) FROM carried c GROUP BY 2
UNION ALL
SELECT 'weak_acks', k.source, '', '', count(*)::float8 FROM acked k WHERE k.weak GROUP BY 2
UNION ALL
SELECT 'late_acks', k.source, '', '', count(*)::float8 FROM acked k WHERE k.disposition = 'late' GROUP BY 2
UNION ALL
SELECT 'late_acks', l.source, '', '', l.n::float8 FROM late_when_decided l
UNION ALL
SELECT 'late_acks', l.source, '', '', l.n::float8 FROM late_builtin l
$$;
