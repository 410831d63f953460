-- Statements of the settle job. Bind parameters: :run_id, :channel.

-- name: settle_common
-- The common case, decided here in one statement rather than in Spark: a validated result that
-- succeeded — a 2xx status and, if aggregated, every entry 2xx — is acked (B.9: nothing failed,
-- every expected result arrived). Python acks more (a live response's non-408 counts as a
-- success); those, and every failure, are left to it. Written once per attempt, taken out of the
-- queue, each source with something to carry out notified (on COMMIT); its rows: how many per
-- source. Bind parameters: :ack (the decision's word), :channel.
WITH decided AS MATERIALIZED (
    SELECT q.signal_id, q.attempt, s.source
    FROM queue_settle q
    JOIN signals s ON s.id = q.signal_id
    JOIN request_results r ON r.signal_id = q.signal_id AND r.attempt = q.attempt
    WHERE needs_transport_settlement(s.api, s.source) AND r.status BETWEEN 200 AND 299
      AND NOT EXISTS (SELECT 1 FROM jsonb_each(r.ack_statuses) e WHERE NOT (e.value::int BETWEEN 200 AND 299))
), stored AS (
    INSERT INTO settlements (signal_id, attempt, decision)
    SELECT d.signal_id, d.attempt, :ack FROM decided d
    ON CONFLICT (signal_id, attempt) DO NOTHING
), dequeued AS (
    DELETE FROM queue_settle q USING decided d WHERE q.signal_id = d.signal_id AND q.attempt = d.attempt
)
SELECT d.source, count(*) AS settled, pg_notify(:channel, d.source)::text AS notified
FROM decided d
GROUP BY d.source

-- name: pending_count
-- How many validated results wait for their transport decision, as this run starts.
SELECT count(*) FROM queue_settle q

-- name: pending_bounds
-- Whether any validated decision waits for its transport decision, and the id range to read.
SELECT min(q.signal_id), max(q.signal_id) FROM queue_settle q

-- name: pending
-- Validated results of signals from connections (queue_settle holds only those), with what the
-- B.9 decision needs (read by Spark).
SELECT q.signal_id, q.attempt, s.api, s.source, s.channel, r.cause, r.status,
       r.ack_statuses::text AS ack_statuses
FROM queue_settle q
JOIN signals s ON s.id = q.signal_id
JOIN request_results r ON r.signal_id = q.signal_id AND r.attempt = q.attempt

-- name: staged
-- How many queued requests this run decided.
SELECT count(*) FROM stage_settlements WHERE run_id = :run_id

-- name: insert_settlements
-- One decision per attempt, written once (a re-run finds it there and writes nothing).
INSERT INTO settlements (signal_id, attempt, decision)
SELECT x.signal_id, x.attempt, x.decision
FROM stage_settlements x
WHERE x.run_id = :run_id AND x.decision IS NOT NULL
ON CONFLICT (signal_id, attempt) DO NOTHING

-- name: dequeue
-- Decided requests leave the queue.
DELETE FROM queue_settle q
USING stage_settlements x
WHERE x.run_id = :run_id AND q.signal_id = x.signal_id AND q.attempt = x.attempt

-- name: counts
-- The run's decisions by kind, for its stats.
SELECT x.decision, count(*) AS n FROM stage_settlements x
WHERE x.run_id = :run_id AND x.decision IS NOT NULL
GROUP BY x.decision ORDER BY x.decision

-- name: notify
-- Wake the connector of every source that has something to carry out (delivered on COMMIT).
SELECT pg_notify(:channel, d.source)
FROM (SELECT DISTINCT s.source FROM stage_settlements x JOIN signals s ON s.id = x.signal_id
      WHERE x.run_id = :run_id AND x.decision IS NOT NULL) d

-- name: clear_staging
-- TRUNCATE is transactional and instant; the step lock means no other run uses the table.
TRUNCATE stage_settlements
