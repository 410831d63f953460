-- What benchmarks/sustained.py asks the ledger. Bind parameters: :source (a rate's connection id,
-- or the seeds' source), :until (when the drain ended), :published_at (the header the publisher
-- stamps, µs since the epoch).

-- name: idle
-- Nothing waits in the pipeline's queues or for the validation gate, and every settlement decided
-- is carried out (each EXISTS reads a queue or a partial index: cheap on a large ledger).
SELECT NOT (EXISTS (SELECT FROM queue_apply) OR EXISTS (SELECT FROM queue_index)
            OR EXISTS (SELECT FROM queue_decide) OR EXISTS (SELECT FROM awaiting_validation())
            OR EXISTS (SELECT FROM queue_settle)
            OR EXISTS (SELECT FROM settlements WHERE carried_out_at IS NULL))

-- name: stored
SELECT count(*) FROM signals s WHERE s.source = :source

-- name: counts
-- A rate's messages: stored, decided, settled (a decision), carried out on the broker.
SELECT count(*) AS stored, count(r.signal_id) AS decided, count(st.signal_id) AS settled,
       count(st.carried_out_at) AS carried_out
FROM signals s
LEFT JOIN request_results r ON r.signal_id = s.id AND r.attempt = 1
LEFT JOIN settlements st ON st.signal_id = s.id AND st.attempt = 1
WHERE s.source = :source

-- name: decisions
SELECT st.decision, count(*) AS n
FROM signals s JOIN settlements st ON st.signal_id = s.id
WHERE s.source = :source
GROUP BY st.decision ORDER BY st.decision

-- name: latencies
-- p50, p95, p99 in seconds of received→decided, received→carried out (the ledger's clocks) and
-- published→carried out (the publisher's clock, from the header: time in the broker counts). A
-- message never decided or carried out counts as waiting until :until.
WITH m AS (
    SELECT extract(epoch FROM COALESCE(r.decided_at, :until) - s.received_at) AS decided,
           extract(epoch FROM COALESCE(st.carried_out_at, :until) - s.received_at) AS carried_out,
           extract(epoch FROM COALESCE(st.carried_out_at, :until)
                              - to_timestamp((s.headers->>:published_at)::bigint / 1e6)) AS published
    FROM signals s
    LEFT JOIN request_results r ON r.signal_id = s.id AND r.attempt = 1
    LEFT JOIN settlements st ON st.signal_id = s.id AND st.attempt = 1
    WHERE s.source = :source
)
SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY decided) AS decided,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY carried_out) AS carried_out,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY published) AS published
FROM m

-- name: now
SELECT clock_timestamp()
