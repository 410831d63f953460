-- ledger_gauges as migration 0021 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW ledger_gauges (metric, label, value) AS
WITH RECURSIVE steps (step) AS (
    SELECT min(step) FROM pipeline_runs
    UNION ALL
    SELECT (SELECT min(p.step) FROM pipeline_runs p WHERE p.step > steps.step) FROM steps WHERE steps.step IS NOT NULL
), last_runs AS (
    SELECT steps.step, r.finished_at, r.stats FROM steps
    CROSS JOIN LATERAL (SELECT p.finished_at, p.stats FROM pipeline_runs p WHERE p.step = steps.step
                        ORDER BY p.id DESC LIMIT 1) r
    WHERE steps.step IS NOT NULL
), open_work AS (
    SELECT q.signal_id, true AS undecided FROM queue_decide q
    UNION ALL SELECT v.signal_id, false FROM awaiting_validation() v
    UNION ALL SELECT q.signal_id, false FROM queue_settle q
    UNION ALL SELECT st.signal_id, false FROM settlements st WHERE st.carried_out_at IS NULL
), per_source AS (
    SELECT s.source, min(s.received_at) FILTER (WHERE w.undecided) AS oldest_undecided,
           min(s.received_at) AS oldest_unsettled,
           count(*) FILTER (WHERE w.undecided AND needs_transport_settlement(s.api, s.source)) AS held_undecided,
           bool_or(needs_transport_settlement(s.api, s.source)) AS from_connection
    FROM open_work w JOIN signals s ON s.id = w.signal_id
    WHERE w.undecided OR needs_transport_settlement(s.api, s.source)
    GROUP BY s.source
), last_seal AS (
    SELECT x.number, x.sealed_at FROM seals x WHERE x.number = (SELECT max(y.number) FROM seals y)
)
SELECT 'queue_pending', q.queue, q.n::float8 FROM (
    SELECT 'apply' AS queue, count(*) AS n FROM queue_apply
    UNION ALL SELECT 'index', count(*) FROM queue_index
    UNION ALL SELECT 'decide', count(*) FROM queue_decide
    UNION ALL SELECT 'validate', count(*) FROM awaiting_validation()
    UNION ALL SELECT 'settle', count(*) FROM queue_settle
    UNION ALL SELECT 'carry_out', count(*) FROM settlements WHERE carried_out_at IS NULL) q
UNION ALL
SELECT g.metric, p.source, g.value FROM per_source p
CROSS JOIN LATERAL (VALUES ('oldest_undecided_age_seconds', extract(epoch FROM now() - p.oldest_undecided)::float8),
                           ('oldest_unsettled_age_seconds', extract(epoch FROM now() - p.oldest_unsettled)::float8),
                           ('held_undecided', CASE WHEN p.from_connection THEN p.held_undecided::float8 END)) g(metric, value)
WHERE g.value IS NOT NULL
UNION ALL
SELECT 'step_last_duration_seconds', r.step, (r.stats ->> 'seconds')::float8 FROM last_runs r
WHERE jsonb_typeof(r.stats -> 'seconds') = 'number'
UNION ALL
SELECT 'step_last_finished_timestamp_seconds', r.step, extract(epoch FROM r.finished_at)::float8 FROM last_runs r
WHERE r.finished_at IS NOT NULL
UNION ALL
SELECT 'pipeline_last_success_timestamp_seconds', '', extract(epoch FROM r.finished_at)::float8 FROM last_runs r
WHERE r.step = 'seal' AND r.finished_at IS NOT NULL
UNION ALL
SELECT 'validation_last_timestamp_seconds', '', extract(epoch FROM r.finished_at)::float8 FROM last_runs r
WHERE r.step = 'validate' AND r.finished_at IS NOT NULL
UNION ALL
SELECT 'validation_failed', '', CASE WHEN r.stats ? 'failures' THEN 1 ELSE 0 END FROM last_runs r WHERE r.step = 'validate'
UNION ALL
SELECT 'seal_last_number', '', COALESCE((SELECT l.number FROM last_seal l), 0)::float8
UNION ALL
SELECT 'seal_last_timestamp_seconds', '', extract(epoch FROM l.sealed_at)::float8 FROM last_seal l
UNION ALL
SELECT 'facts_unsealed', '', c.n::float8
FROM (SELECT sealed_upto() AS upto OFFSET 0) sealed
CROSS JOIN LATERAL (SELECT count(*) AS n FROM fact_leaves l WHERE l.seq > sealed.upto) c
UNION ALL
SELECT 'archive_last_timestamp_seconds', '', extract(epoch FROM a.archived_at)::float8
FROM archives a WHERE a.number = (SELECT max(x.number) FROM archives x)
UNION ALL
SELECT 'oldest_hot_signal_timestamp_seconds', '', extract(epoch FROM o.received_at)::float8
FROM signals o WHERE o.id = (SELECT min(x.id) FROM signals x);
