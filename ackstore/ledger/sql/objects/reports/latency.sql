-- The latency report: per source and bucket, how long signals took from checkpoint to checkpoint.

-- name: report_latency
-- Per source and time bucket (by received_at, from midnight UTC): how long the signals took
-- from one checkpoint to the next — p50, p95 and p99 in seconds over those that reached both;
-- ``signals`` counts the bucket's signals, ``measured`` those that reached both checkpoints.
-- A measure no signal reached is left out, except received_to_decided. Grouped once per bucket
-- (one sort per measure), then one row per measure.
-- version: 0010
CREATE OR REPLACE FUNCTION report_latency(since timestamptz, until timestamptz, bucket interval, only_source text)
RETURNS TABLE (source text, bucket_start timestamptz, measure text, signals bigint, measured bigint,
               p50 double precision, p95 double precision, p99 double precision)
LANGUAGE sql STABLE AS $$
WITH spans AS (
    SELECT p.source, date_bin(bucket, p.received_at, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS bucket_start,
           extract(epoch FROM p.decided_at - p.received_at)::float8 AS received_to_decided,
           extract(epoch FROM p.settlement_decided_at - p.decided_at)::float8 AS decided_to_settlement_decided,
           extract(epoch FROM p.carried_out_at - p.decided_at)::float8 AS decided_to_carried_out,
           extract(epoch FROM p.carried_out_at - p.received_at)::float8 AS received_to_carried_out
    FROM signal_paths(since, until, only_source) p
), per_bucket AS (
    SELECT x.source, x.bucket_start, count(*) AS signals,
           count(x.received_to_decided) AS n1,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.received_to_decided) AS q1,
           count(x.decided_to_settlement_decided) AS n2,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.decided_to_settlement_decided) AS q2,
           count(x.decided_to_carried_out) AS n3,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.decided_to_carried_out) AS q3,
           count(x.received_to_carried_out) AS n4,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.received_to_carried_out) AS q4
    FROM spans x
    GROUP BY x.source, x.bucket_start
)
SELECT b.source, b.bucket_start, m.measure, b.signals, m.measured, m.q[1], m.q[2], m.q[3]
FROM per_bucket b
CROSS JOIN LATERAL (VALUES (1, 'received_to_decided', b.n1, b.q1), (2, 'decided_to_settlement_decided', b.n2, b.q2),
                           (3, 'decided_to_carried_out', b.n3, b.q3), (4, 'received_to_carried_out', b.n4, b.q4)
) AS m(n, measure, measured, q)
WHERE m.n = 1 OR m.measured > 0
ORDER BY b.source, b.bucket_start, m.n
$$;
